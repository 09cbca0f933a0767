"""``python manage.py create_api_token NAME`` — print a new bot API token once."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from memory.auth import issue_token


class Command(BaseCommand):
    help = "Create a bearer token for the bot API and print it once (only its SHA-256 is stored)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="a label for the bot or tool that will use the token")

    def handle(self, *args, **options) -> None:
        name = (options["name"] or "").strip()
        if not name:
            raise CommandError("NAME must not be blank.")
        if len(name) > 100:
            raise CommandError("NAME is limited to 100 characters.")
        row, plain = issue_token(name)
        self.stderr.write(f"Token #{row.pk} '{row.name}' created. It is shown only this once:")
        self.stdout.write(plain)
