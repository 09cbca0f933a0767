from __future__ import annotations

from django.apps import AppConfig


class TuningConfig(AppConfig):
    name = "tuning"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Plug the tuning app into memory's registries (memory never imports tuning).

        * stored profiles become visible to the live overrides (:mod:`memory.overrides`);
        * evaluation and comparison jobs whose worker died are re-queued by
          :func:`memory.dispatch.jobs.recover_orphaned_jobs` (their replays only read).
        """
        # Models and modules that use them load only once the app registry is ready.
        from memory import overrides
        from memory.dispatch import jobs
        from tuning.evaluation import JOB_TASKS
        from tuning.services import stored_profile_params

        overrides.register_profile_loader(stored_profile_params)
        for kind, task_name in JOB_TASKS.items():
            jobs.register_rerunnable(kind, task_name)
