"""``FactOperation`` now lives in memory (``memory/0017_fact_operations``); the table is untouched.

Curation keeps a proxy of the same name, so its content type — and with it the
``curate_fact`` / ``undo_operation`` permissions and every role that holds them — stays.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('curation', '0001_initial'),
        ('memory', '0017_fact_operations'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='FactOperation')],
            database_operations=[],
        ),
        migrations.CreateModel(
            name='FactOperation',
            fields=[],
            options={
                'proxy': True,
                'indexes': [],
                'constraints': [],
                'permissions': [('curate_fact', 'Can pin, invalidate, restore and replace facts'), ('undo_operation', 'Can undo fact operations')],
            },
            bases=('memory.factoperation',),
        ),
    ]
