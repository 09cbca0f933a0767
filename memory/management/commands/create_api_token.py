"""``python manage.py create_api_token NAME --scope bot`` — print a new API token once."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from memory.api.auth import SCOPES, TokenNameTaken, TokenScopeError, issue_token


class Command(BaseCommand):
    help = "Create a bearer token for the bot API and print it once (only its SHA-256 is stored)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="a label for the bot or tool that will use the token")
        parser.add_argument(
            "--scope",
            action="append",
            choices=list(SCOPES),
            dest="scopes",
            help="what the token may do (repeat for several; default bot; admin implies all)",
        )

    def handle(self, *args, **options) -> None:
        name = (options["name"] or "").strip()
        if not name:
            raise CommandError("NAME must not be blank.")
        if len(name) > 100:
            raise CommandError("NAME is limited to 100 characters.")
        try:
            row, plain = issue_token(name, options["scopes"] or ["bot"])
        except (TokenScopeError, TokenNameTaken) as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(f"Token #{row.pk} '{row.name}' ({', '.join(row.scopes)}) created. It is shown only this once:")
        self.stdout.write(plain)
