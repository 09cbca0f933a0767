"""Create the console roles (groups) and their permissions; safe to run any number of times.

Three console permissions are declared on the model they concern
(``memory.MemoryEdge``, ``memory.Turn``, ``memory.ImportBatch`` Meta); they are also
ensured here with ``get_or_create`` so the command works before post-migrate has run. Each group's permissions are *set* (not added), so a
rerun also removes anything granted by hand to the group.
"""
from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.management import create_contenttypes
from django.contrib.contenttypes.models import ContentType
from django.core.management.base import BaseCommand

#: (app_label, model, codename, name) of the console permissions (also in the models' Meta).
CONSOLE_PERMISSIONS: list[tuple[str, str, str, str]] = [
    ("memory", "memoryedge", "preview_association", "Can view the association graph and preview spreading"),
    ("memory", "turn", "preview_recall", "Can use the recall playground"),
    ("memory", "forgetrecord", "forget_memory", "Can preview and carry out forgetting"),
    ("memory", "forgetrecord", "export_person", "Can export everything stored about a person"),
    ("memory", "apitoken", "manage_api_tokens", "Can list, create and revoke API tokens"),
    ("memory", "importbatch", "import_knowledge", "Can import knowledge and delete import batches"),
    ("tuning", "relevancelabel", "label_relevance", "Can label which facts of a turn were relevant"),
]

#: Read access every console role has: the memory layers, jobs and events.
BROWSE = [
    f"memory.view_{model}"
    for model in (
        "person", "identity", "stream", "message", "episode", "episodecue", "fact", "knowledge",
        "importbatch", "memorynode", "memoryedge", "pipelineevent", "job", "turn",
    )
]

ROLES: dict[str, list[str]] = {
    # Operators curate facts: pin, unpin, invalidate, restore, replace, adjudicate conflicts;
    # and serve a person's requests: forgetting (after its preview; not undoable) and the export of
    # everything stored about them (every stream at once: no other role has it).
    "operator": [*BROWSE, "curation.curate_fact", "memory.forget_memory", "memory.export_person"],
    # Reviewers audit the operation journal and undo entries of it, and label which facts a turn should
    # have had in its prompt (the labels tuning evaluates and fits against).
    "reviewer": [*BROWSE, "curation.view_factoperation", "curation.undo_operation", "tuning.label_relevance"],
    # Staff preview association and recall, tune retrieval and import knowledge.
    "staff": [
        *BROWSE,
        "memory.preview_association",
        "memory.preview_recall",
        "memory.import_knowledge",
        "tuning.tune_retrieval",
        "tuning.label_relevance",
        "tuning.view_retrievalprofile",
        "tuning.add_retrievalprofile",
        "tuning.change_retrievalprofile",
        "tuning.delete_retrievalprofile",
    ],
}


def ensure_console_permissions() -> None:
    for app_label, model, codename, name in CONSOLE_PERMISSIONS:
        content_type = ContentType.objects.get_for_model(apps.get_model(app_label, model))
        Permission.objects.get_or_create(content_type=content_type, codename=codename, defaults={"name": name})


def ensure_roles() -> dict[str, Group]:
    """Create or update the three groups; returns them by name."""
    # migrate's post_migrate makes every model's content type and default permissions; a store flushed or
    # restored without them (and a process caching content types of an earlier state) gets them here
    ContentType.objects.clear_cache()
    for app_config in apps.get_app_configs():
        create_contenttypes(app_config, verbosity=0)
        create_permissions(app_config, verbosity=0)
    ensure_console_permissions()
    groups = {}
    for role, dotted in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        wanted = []
        for perm in dotted:
            app_label, codename = perm.split(".")
            wanted.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        group.permissions.set(wanted)
        groups[role] = group
    return groups


class Command(BaseCommand):
    help = "Create or update the console groups operator / reviewer / staff and their permissions."

    def handle(self, *args: Any, **options: Any) -> None:
        groups = ensure_roles()
        if options["verbosity"] < 1:
            return
        for name, group in groups.items():
            self.stdout.write(f"{name}: {group.permissions.count()} permissions")
