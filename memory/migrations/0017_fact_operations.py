"""The fact-operations journal moves from the curation app into memory, table untouched.

State only: ``fact_operations`` was created by ``curation/0001_initial`` and stays as
it is (same table, columns and indexes). ``curation/0002_fact_operations_proxy`` then
drops the model from curation's state and keeps a proxy with its permissions.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0016_verbose_names'),
        ('curation', '0001_initial'),  # created the table
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='FactOperation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('at', models.BigIntegerField()),
                        ('actor', models.CharField(choices=[('manual', '人工'), ('auto', '系统自动'), ('n4', '自动纠错')], max_length=16)),
                        ('op', models.CharField(choices=[('invalidate', '标失效'), ('restore', '恢复'), ('pin', '永久保留'), ('unpin', '取消永久保留'), ('supersede', '标记取代'), ('replace', '人工取代'), ('adjudicate', '冲突裁决'), ('undo', '撤销')], max_length=16)),
                        ('prev', models.JSONField(default=dict)),
                        ('user', models.CharField(blank=True, default='', max_length=150)),
                        ('fact', models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='operations', to='memory.fact')),
                        ('person', models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='memory.person')),
                        ('related_fact', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='memory.fact')),
                        ('undo_of', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='memory.factoperation')),
                        ('undone_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='memory.factoperation')),
                    ],
                    options={
                        'db_table': 'fact_operations',
                        'indexes': [models.Index(fields=['fact'], name='idx_fact_operations_fact'), models.Index(fields=['person', 'at'], name='idx_fact_operations_person')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
