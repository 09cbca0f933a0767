"""``python manage.py revoke_api_token NAME`` — refuse a token everywhere within a second."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from memory.api.auth import revoke_tokens


class Command(BaseCommand):
    help = "Revoke the live API token(s) with this name; every process refuses them within 1 s."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="the token's name (as given to create_api_token)")

    def handle(self, *args, **options) -> None:
        name = (options["name"] or "").strip()
        count = revoke_tokens(name=name, user="manage.py")
        if not count:
            raise CommandError(f"No live token is called '{name}'.")
        self.stdout.write(f"Revoked {count} token(s) called '{name}'.")
