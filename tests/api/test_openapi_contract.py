"""The OpenAPI document says what the server does (issue 11, item 8), checked without fuzzing."""
from __future__ import annotations

import json

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

METHODS = {"get", "post", "patch", "put", "delete"}


@pytest.fixture
def spec(db) -> dict:
    return Client().get("/api/openapi.json").json()


def _ref(schema: dict) -> str | None:
    return schema.get("$ref", "").rsplit("/", 1)[-1] or None


def test_the_document_has_no_repeated_key(db):
    """Swagger UI refuses a document with a key twice ("duplicated mapping key": /api/docs draws nothing);
    Python's json keeps the last one silently, so the raw text is read with a hook that refuses them."""
    def once(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), sorted(k for k in set(keys) if keys.count(k) > 1)
        return dict(pairs)

    json.loads(Client().get("/api/openapi.json").content, object_pairs_hook=once)


def test_every_503_is_documented(spec):
    assert all("503" in op["responses"] for item in spec["paths"].values() for op in item.values())


def test_every_route_documents_401_and_its_422(spec):
    missing = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            codes = set(op["responses"])
            if "401" not in codes:
                missing.append(f"{method.upper()} {path}: 401")
            if (op.get("parameters") or op.get("requestBody")) and "422" not in codes:
                missing.append(f"{method.upper()} {path}: 422")
    assert not missing, missing


def test_every_request_body_forbids_unknown_fields(spec):
    schemas = spec["components"]["schemas"]
    seen, todo = set(), []
    for item in spec["paths"].values():
        for op in item.values():
            body = (op.get("requestBody") or {}).get("content", {}).get("application/json", {}).get("schema", {})
            todo += [_ref(s) for s in [body, *body.get("anyOf", [])] if _ref(s)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        assert schemas[name].get("additionalProperties") is False, name
        for prop in schemas[name].get("properties", {}).values():
            todo += [_ref(s) for s in [prop, *prop.get("anyOf", [])] if _ref(s)]
    assert {"MessageIn", "StreamRef", "PersonRef", "ResolveIn", "ProfileIn", "TargetIn", "CompareIn"} <= seen


def test_rules_checked_after_parsing_are_in_the_schema(spec):
    schemas = spec["components"]["schemas"]
    assert "pattern" in schemas["FactIn"]["properties"]["content"]
    assert "pattern" in schemas["KnowledgeIn"]["properties"]["content"]
    assert "pattern" in schemas["ReplaceIn"]["properties"]["content"]
    assert "pattern" in schemas["ImportIn"]["properties"]["text"]
    assert schemas["ImportIn"]["properties"]["text"]["maxLength"] == 200_000
    assert "pattern" in schemas["PersonRef"]["properties"]["external_id"]
    assert schemas["MessageIn"]["then"]["required"] == ["sender"]
    assert schemas["MessageIn"]["properties"]["content"]["maxLength"] == 20_000
    params = schemas["ProfileIn"]["properties"]["params"]
    assert params["additionalProperties"] is False and params["properties"]["ppr_hops"]["type"] == "integer"
    assert "differ" in schemas["ResolveIn"]["properties"]["drop_fact_id"]["description"]


def test_operation_ids_name_the_app_and_the_view_not_the_module(spec):
    """Generated clients name their methods after ``operationId``: moving a route between an app's modules must
    not rename them, so the id is ``<app>_api_<function>`` whatever module defines the view."""
    from config.api import api

    views = {}
    for bound in api._get_bound_routers():
        for path_view in bound.path_operations.values():
            for operation in path_view.operations:
                views[api.get_openapi_operation_id(operation)] = operation.view_func
    ids = [op["operationId"] for item in spec["paths"].values() for op in item.values() if isinstance(op, dict)]
    assert len(ids) == len(set(ids)) == len(views)
    for operation_id in ids:
        view = views[operation_id]
        assert operation_id == f"{view.__module__.split('.')[0]}_api_{view.__name__}"
    assert "memory_api_post_turn" in ids and "curation_api_undo" in ids


def test_every_route_is_listed_once_under_its_own_tag(spec):
    tags = {f"{method.upper()} {path}": op.get("tags") for path, item in spec["paths"].items()
            for method, op in item.items() if method in METHODS}
    assert all(len(t) == 1 for t in tags.values()), {k: t for k, t in tags.items() if len(t) != 1}
    assert tags["POST /api/v1/facts/{fact_id}/pin"] == ["curation"] and tags["GET /api/v1/tuning"] == ["tuning"]
    assert tags["POST /api/v1/turns"] == ["memory"] and tags["POST /api/v1/forget"] == ["forget"]


def test_every_schema_has_a_real_example_that_its_model_accepts(spec):
    from config.api import EXAMPLES

    schemas = spec["components"]["schemas"]
    assert not [name for name, schema in schemas.items() if not schema.get("examples")]
    by_name = {model.__name__: model for model in EXAMPLES}
    for name, schema in schemas.items():
        by_name[name].model_validate(schema["examples"][0])  # strict request models too: a drifted example fails
    message = schemas["MessageIn"]["examples"][0]
    assert message["stream"]["platform"] == "qq" and any("\u4e00" <= ch <= "\u9fff" for ch in message["content"])
