"""A NUL character (``\\x00``) in console input: a form error or a 400, never a 500, on both backends.

PostgreSQL cannot store or even compare text holding a NUL; SQLite can. Posted text is
refused by the forms (``memory.fields.TextField``) with one clear sentence; a query string
holding one is refused before any view runs (``config.middleware``), the API's with its
JSON 422.
"""
from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from console import forms as console_forms
from curation import forms as curation_forms
from memory.api.auth import issue_token
from memory.fields import NUL_MESSAGE, TextField
from memory.models import ApiToken, Fact, ImportBatch
from tuning import forms as tuning_forms
from tuning.models import RetrievalProfile

pytestmark = pytest.mark.django_db

NUL = "住在\x00杭州"
SAID = str(NUL_MESSAGE)
TEXT_FORMS = [
    console_forms.FactFilterForm, console_forms.SearchForm, console_forms.EpisodeSearchForm, console_forms.SpreadForm,
    console_forms.PlaygroundForm, console_forms.ImportForm, curation_forms.ReplaceForm, tuning_forms.DraftForm,
    tuning_forms.CompareForm,
]


@pytest.mark.parametrize("form_class", TEXT_FORMS, ids=lambda c: c.__name__)
def test_every_text_field_of_every_form_refuses_a_nul_in_plain_words(form_class):
    form = form_class()
    text_fields = [name for name, field in form.fields.items() if isinstance(field, TextField)]
    assert text_fields
    for name in text_fields:
        bound = form_class({name: NUL})
        assert not bound.is_valid()
        assert SAID in bound.errors.get(name, []), (name, bound.errors)


def test_replacing_a_fact_with_a_nul_is_a_form_error(operator, memory_set, frozen_now):
    fact_id = memory_set["facts"][0]
    response = operator.post(reverse("curation:fact_action", args=[fact_id, "replace"]),
                             {"confirmed": "1", "content": NUL})
    assert response.status_code == 400 and SAID in response.content.decode()
    assert Fact.objects.get(pk=fact_id).superseded_by_id is None


@pytest.mark.parametrize("field", ["text", "origin_name"])
def test_importing_a_nul_is_a_form_error(staff, field):
    data = {"text": "月球是地球的卫星", "origin_name": "月球.txt", field: NUL}
    response = staff.post(reverse("console:imports"), data)
    assert response.status_code == 400 and SAID in response.content.decode()
    assert not ImportBatch.objects.exists()


def test_uploading_a_file_with_a_nul_is_a_form_error(staff):
    upload = SimpleUploadedFile("月球.txt", "月球\x00卫星".encode())
    response = staff.post(reverse("console:imports"), {"upload": upload})
    assert response.status_code == 400 and SAID in response.content.decode()
    assert not ImportBatch.objects.exists()


def test_a_token_name_with_a_nul_is_refused(admin_client_):
    response = admin_client_.post(reverse("console:tokens"), {"name": "bot\x00", "scopes": ["bot"]})
    assert response.status_code == 400 and SAID in response.content.decode()
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize("field", ["name", "p_fact_recall_limit", "compare_with"])
def test_a_tuning_draft_with_a_nul_is_a_form_error(admin_client_, field):
    data = {"action": "save", "name": "试验", "p_fact_recall_limit": "3", field: "3\x00"}
    response = admin_client_.post(reverse("tuning:draft"), data)
    assert response.status_code == 400 and SAID in response.content.decode()
    assert not RetrievalProfile.objects.exists()


@pytest.mark.parametrize("url", ["tuning:apply", "tuning:delete"])
def test_applying_or_deleting_a_profile_named_with_a_nul_says_so(admin_client_, url):
    response = admin_client_.post(reverse(url), {"name": "试验\x00"}, follow=True)
    assert response.status_code == 200 and "不能含有 NUL 字符" in response.content.decode()


def test_comparing_profiles_named_with_a_nul_is_refused(admin_client_):
    response = admin_client_.post(reverse("tuning:compare"), {"a": "@active", "b": "x\x00"}, follow=True)
    assert response.status_code == 200 and "请选择要对比的两组参数" in response.content.decode()


@pytest.mark.parametrize("path", [
    "/facts/?q=%00", "/facts/?kind=a%00b", "/episodes/?q=%E6%9D%AD%00", "/knowledge/?q=%00", "/persons/?q=%00",
    "/graph/?q=%00", "/graph/?node=fact:1%00", "/playground/?text=%00", "/tuning/export/?name=%00",
    "/operations/?actor=%00", "/admin/memory/fact/?q=%00", "/admin/tuning/retrievalprofile/?q=%00", "/facts/?%00=1",
])
def test_a_nul_in_a_query_string_is_a_400(admin_client_, memory_set, path):
    response = admin_client_.get(path)
    assert response.status_code == 400
    assert "查询参数含有 NUL 字符" in response.content.decode()


def test_a_nul_in_a_stream_search_is_a_400(operator, memory_set):
    response = operator.get(reverse("console:stream", args=[memory_set["direct"].pk]), {"q": "过敏\x00"})
    assert response.status_code == 400


def test_a_nul_in_an_api_query_string_is_the_apis_422(client):
    _, token = issue_token("nul-bot", ["admin"])
    response = client.get("/api/v1/tuning/export", {"name": "x\x00"}, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 422 and "NUL" in response.json()["detail"]
