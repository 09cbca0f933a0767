"""Import a UTF-8 text file as knowledge, synchronously, with a progress line.

The same limits, chunking, deduplication and job/batch bookkeeping as an
import from the console; the import shows up there as a finished job.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memory import pipeline


class Command(BaseCommand):
    help = "Import a UTF-8 text file as knowledge (blank-line paragraphs, ≤ 1200 characters a chunk)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--name", default="", help="origin name shown in the console (default: file name)")
        parser.add_argument("--no-embed", action="store_true", help="leave the vectors to the backfill")

    def handle(self, *args: Any, file: Path, name: str = "", no_embed: bool = False, **options: Any) -> None:
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc}") from exc
        try:
            text = pipeline.validate_upload(data)
            job = pipeline.start_import(text=text, origin_name=name or file.name, kind="upload", enqueue=False)
        except (pipeline.ImportLimitError, pipeline.ImportBusyError) as exc:
            raise CommandError(str(exc)) from exc

        verbose = options["verbosity"] >= 1

        def progress(done: int, total: int) -> None:
            if verbose:
                self.stdout.write(f"\rimported {done}/{total} chunks", ending="")
                self.stdout.flush()

        result = pipeline.run_import(job_id=job.pk, embed=not no_embed, on_progress=progress)
        if verbose:
            self.stdout.write("")
        if result is None:
            raise CommandError(f"import job {job.pk} did not run")
        self.stdout.write(
            "batch={batch_id} submitted={submitted} added={added} duplicated={duplicated} embedded={embedded}".format(
                **result
            )
        )
