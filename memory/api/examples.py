"""One real example of every request and response body of memory's routes, for ``/api/docs``.

Taken from the API answering on the demo memory (``make run``): 小林 in her direct chat on QQ,
the hike group, the facts the pipeline learnt. ``config.api`` puts each one (``memory.api.routes.EXAMPLES``) into the OpenAPI
document as the ``examples`` of its schema; ``tests/api/test_openapi.py`` validates every
example against its model, so an example that drifts from the schema fails the suite.
"""
from __future__ import annotations

from typing import Any

from memory.api import schemas as s

LIN_STREAM = {"platform": "qq", "kind": "direct", "external_id": "lin", "name": "小林（私聊）"}
LIN = {"platform": "qq", "external_id": "lin", "name": "小林"}
AT = 1796383932894
ALLERGY = {"id": 13, "person_id": 2, "kind": "身份", "slot": "", "content": "小林对花生过敏", "retention": 0.99999,
           "score": 1.02, "conflict_slot": None, "completed": False}
CAT = {"id": 3, "person_id": 2, "kind": "偏好", "slot": "", "content": "小林喜欢猫", "retention": 0.6401, "score": 1.0128,
       "conflict_slot": None, "completed": False}
EPISODE = {"id": 2, "summary": "小林说搬家的箱子拆完了，新家离公司很近，橘猫团子一路坐车过来", "started_at": 1791379200000,
           "ended_at": 1791380100000, "score": 0.62}
WORKING = {"id": 164, "role": "user", "person_id": 2, "content": "当然，团子坐了四个小时的车，一路都在叫", "at": 1794654720000}
TERMS = {"id": 3, "content": "小林喜欢猫", "source": "lexical", "bm25": -4.21, "lexical": 0.808, "coverage": 1.0,
         "cosine": 0.512, "relevance": 0.81, "calibrated": 1.0, "retention": 0.6401, "prior": 0.0128, "score": 1.0128,
         "eligible": True}
FACT_ROW = {"id": 13, "kind": "身份", "content": "小林对花生过敏", "slot": "", "origin_kind": "direct", "strength": 1.0,
            "retention": 0.99999, "half_life_hours": 8760.0, "active": True, "invalid": False, "pinned": True,
            "superseded_by": None, "due_at": 1898139320000, "hit_count": 2, "last_hit_at": 1796383932800,
            "updated_at": 1791950640000, "created_at": 1791950640000}
FORGET_PLAN = {
    "target": "message", "id": 232, "label": "消息 #232", "digest": "0cd3ab8444b57589", "undoable": False,
    "counts": {"messages": 1, "redacted_messages": 0, "facts": 0, "episodes": 0, "turns": 0, "trimmed_turns": 1},
    "ids": {"messages": [232], "redacted_messages": [], "facts": [], "episodes": [], "turns": [], "trimmed_turns": [4]},
}

EXAMPLES: dict[type, Any] = {
    s.StreamRef: LIN_STREAM,
    s.PersonRef: LIN,
    s.FieldError: {"field": "body.sender", "message": "is required when role is 'user'", "type": "missing"},
    s.ErrorOut: {"detail": "body.sender: is required when role is 'user'",
                 "errors": [{"field": "body.sender", "message": "is required when role is 'user'", "type": "missing"}]},
    s.MessageIn: {"stream": LIN_STREAM, "sender": LIN, "role": "user", "content": "我下周要去杭州出差，顺便想去西湖边走走",
                  "external_message_id": "qq-msg-90231"},
    s.MessagePatch: {"content": "我下周要去杭州出差，顺便去西湖边走走"},
    s.MessageOut: {"id": 232, "stream_id": 2, "person_id": 2},
    s.TurnIn: {"stream": LIN_STREAM, "speaker": LIN, "text": "你还记得我对什么过敏吗？"},
    s.ConfirmIn: {"at": AT},
    s.WorkingMessageOut: WORKING,
    s.TurnFactOut: ALLERGY,
    s.EpisodeOut: EPISODE,
    s.TurnOut: {"turn_id": 4, "stream_id": 2, "speaker_id": 2, "working_memory": [WORKING], "facts": [ALLERGY],
                "episodes": [EPISODE]},
    s.ConfirmOut: {"turn_id": 4, "facts": [ALLERGY], "conflict_members": [], "reinforced": [13], "used_vector": True},
    s.RecallIn: {"stream": LIN_STREAM, "speaker": LIN, "query": "小林的猫", "hops": 2},
    s.RankTermsOut: TERMS,
    s.SpreadHitOut: {"kind": "episode", "id": 2, "content": EPISODE["summary"], "score": 0.21, "hops": 1},
    s.RecallOut: {"stream_id": 2, "speaker_id": 2, "facts": [CAT], "episodes": [EPISODE],
                  "spread": [{"kind": "episode", "id": 2, "content": EPISODE["summary"], "score": 0.21, "hops": 1}],
                  "observation": "想起：小林喜欢猫；顺带想起：小林说搬家的箱子拆完了……", "fact_terms": [TERMS],
                  "held_back": [], "used_vector": True},
    s.InspectIn: {"stream": LIN_STREAM, "query": "过敏", "limit": 3},
    s.InspectMessageOut: {"id": 50, "role": "user", "person_id": 2, "content": "我对花生过敏，结果那家的凉面里放了花生酱",
                          "at": 1791950640000, "score": 0.745},
    s.InspectOut: {"stream_id": 2, "messages": [
        {"id": 50, "role": "user", "person_id": 2, "content": "我对花生过敏，结果那家的凉面里放了花生酱",
         "at": 1791950640000, "score": 0.745}]},
    s.ConsultIn: {"query": "猫能吃巧克力吗", "limit": 2},
    s.KnowledgeHitOut: {"id": 4, "content": "巧克力里的可可碱对猫有毒，少量也可能引起呕吐。", "score": 0.71},
    s.ConsultOut: {"knowledge": [{"id": 4, "content": "巧克力里的可可碱对猫有毒，少量也可能引起呕吐。", "score": 0.71}]},
    s.FactIn: {"person": LIN, "kind": "偏好", "content": "小林喜欢在西湖边散步", "stream_kind": "direct"},
    s.FactWriteOut: {"fact_id": 50, "person_id": 2, "created": True, "conflict_with": [], "superseded": None,
                     "origin_promoted": False},
    s.FactRowOut: FACT_ROW,
    s.PersonFactsOut: {"person_id": 2, "at": AT, "facts": [FACT_ROW]},
    s.KnowledgeIn: {"content": "西湖在杭州市西面，湖边有苏堤和白堤。", "source": "api"},
    s.KnowledgeOut: {"id": 17, "created": True},
    s.ImportIn: {"text": "龙井茶产自杭州西湖一带。\n\n碧螺春产自苏州太湖。", "origin_name": "茶叶小知识.txt"},
    s.ImportOut: {"job_id": 2, "batch_id": 2, "status": "done", "progress": 2, "total": 2,
                  "result": {"submitted": 2, "added": 2, "duplicated": 0, "embedded": 2}, "error": ""},
}
#: The forget routes' bodies (their schemas are declared beside the routes, which key them: memory/api/routes.py).
FORGET = {"in": {"target": "message", "id": 232}, "confirm": {"target": "message", "id": 232, "digest": "0cd3ab8444b57589"},
          "plan": FORGET_PLAN, "done": {**FORGET_PLAN, "record_id": 7}}
