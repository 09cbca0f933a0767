"""The curation actions an operator can take on a fact: service, button label and confirmation text.

The one home of these texts: the fact buttons (``{% fact_action %}`` in
``curation/_fact_actions.html``, their ``hx-confirm`` dialog), the confirmation pages
(the no-JavaScript path), the bulk confirmation and the success messages all read them here.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy, ngettext, pgettext_lazy

from curation import services


class Action(NamedTuple):
    service: Callable[..., Any]
    label: Promise
    confirmation: Promise
    danger: bool = False


ACTIONS: dict[str, Action] = {
    "pin": Action(services.pin_fact, pgettext_lazy("action", "永久保留"),
                  gettext_lazy("永久保留后这条事实不再随时间淡忘；可以在操作流水里撤销。")),
    "unpin": Action(services.unpin_fact, gettext_lazy("取消永久保留"), gettext_lazy("取消后这条事实重新按它的类型随时间淡忘。")),
    "invalidate": Action(services.invalidate_fact, gettext_lazy("标失效"),
                         gettext_lazy("标失效后该事实不再进入召回与提示词，但保留记录，随时可以恢复。"), danger=True),
    "restore": Action(services.restore_fact, gettext_lazy("恢复"), gettext_lazy("恢复后该事实重新参与召回。")),
    "replace": Action(services.replace_fact, gettext_lazy("改成"), gettext_lazy("用新的说法取代这条事实；旧事实标为已被取代，可以撤销。")),
}
#: Actions the facts table offers for the ticked rows.
BULK_ACTIONS = ("invalidate", "pin")


def keep_confirmation(others: int) -> str:
    """What keeping one member of a conflict group does to the ``others``."""
    return ngettext(
        "保留该成员，组内其余 %(counter)s 条将被标失效；裁决可在操作流水里撤销。",
        "保留该成员，组内其余 %(counter)s 条将被标失效；裁决可在操作流水里撤销。",
        others,
    ) % {"counter": others}
