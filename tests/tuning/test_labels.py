"""Every tunable parameter has the words the console shows for it (its label and what turning it changes)."""
from __future__ import annotations

from django.utils import translation

from memory.engine.tuning import WHITELIST
from tuning.labels import PARAM_HELP, PARAM_LABELS


def test_every_whitelisted_parameter_has_a_label_and_a_meaning_in_both_languages():
    assert set(PARAM_LABELS) == set(WHITELIST) and set(PARAM_HELP) == set(WHITELIST)
    with translation.override("en"):
        untranslated = [name for name in WHITELIST
                        for text in (PARAM_LABELS[name], PARAM_HELP[name]) if any("\u4e00" <= c <= "\u9fff" for c in str(text))]
    assert not untranslated, untranslated
