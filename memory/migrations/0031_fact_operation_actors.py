"""The journal's actors are the console's and the automatic paths'; "n4" (a feedback correction the
reference has and this project does not) is gone from the choices."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0030_export_person_permission'),
    ]

    operations = [
        migrations.AlterField(
            model_name='factoperation',
            name='actor',
            field=models.CharField(choices=[('manual', '人工'), ('auto', '系统自动')], max_length=16),
        ),
    ]
