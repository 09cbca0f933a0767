"""Realistic Chinese chat lines with self-disclosures, shared by worker and integration tests."""
from __future__ import annotations

CHAT = [
    "我住在杭州西湖区，每天骑车上班",
    "周末我们去爬了宝石山，风景很好",
    "我是产品经理，最近在做一个新项目",
    "下个月我打算去成都出差一周",
    "我对花生过敏，吃东西要特别小心",
    "昨天晚上看了一部科幻电影，剧情很精彩",
    "我喜欢喝冰美式，每天早上一杯",
    "公司楼下新开了一家面馆，味道不错",
]
