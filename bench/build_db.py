"""Build a realistic memory database at scale (seeded, reproducible).

Text: template sentences mixed with real Chinese sentences of MemDaily (read from
``../shared/data``; ``--templates-only`` without them). Default scale (the engine issue's): 2,000 persons, 20,000 facts, 25,000 knowledge
items with 512-d vectors, 200,000 messages (each with a 512-d vector, as the embedding
backfill leaves them), 20,000 episodes (3 cues each) and 100,000 association edges. Rows are written in bulk, but every FTS row is
produced by the same tokeniser and lexical module the services use.

    python -m bench.build_db --out /tmp/memory-bench.sqlite3 [--scale 0.1]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

SURNAMES = "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤"
GIVEN = "伟芳娜秀英敏静丽强磊军洋勇艳杰娟涛明超秀兰霞平刚桂英华玉萍红娥玲芬芳燕彩春菊兰凤洁梅琳素云莲真环雪荣爱妹霞香月莺媛艳瑞凡佳嘉琼勤珍贞莉桂娣叶璧璐娅琦晶妍茜秋珊莎锦黛青倩婷姣婉娴瑾颖露瑶怡婵雁蓓纨仪荷丹蓉眉君琴蕊薇菁梦岚苑婕馨瑗琰韵融园艺咏卿聪澜纯毓悦昭冰爽琬茗羽希宁欣飘育滢馥筠柔竹霭凝晓欢霄枫芸菲寒伊亚宜可姬舒影荔枝丽秀娟英华"
CITIES = ["北京", "上海", "广州", "深圳", "杭州", "成都", "重庆", "武汉", "西安", "南京", "苏州", "天津", "长沙", "郑州", "青岛", "厦门", "昆明", "大连", "宁波", "合肥"]
JOBS = ["程序员", "老师", "医生", "护士", "设计师", "会计", "律师", "学生", "厨师", "销售", "产品经理", "摄影师", "记者", "司机"]
FOODS = ["火锅", "香菜", "榴莲", "寿司", "拉面", "烧烤", "奶茶", "咖啡", "麻辣烫", "小龙虾", "饺子", "螺蛳粉", "披萨", "冰淇淋"]
HOBBIES = ["跑步", "游泳", "弹吉他", "打篮球", "爬山", "看电影", "打游戏", "钓鱼", "画画", "写代码", "摄影", "下围棋", "练瑜伽", "追剧"]
PETS = ["猫", "狗", "仓鼠", "兔子", "鹦鹉", "金鱼"]
EVENTS = ["面试", "考试", "搬家", "出差", "旅行", "生病", "加班", "相亲", "装修", "比赛", "演出", "婚礼"]
TOPICS = ["天气", "工作", "周末", "电影", "游戏", "旅游", "美食", "学习", "健身", "宠物", "音乐", "家人", "朋友", "购物"]
#: a live store's shape: messages not yet summarised per stream (< SUMMARIZE_TRIGGER_MESSAGES, 48), and
#: messages after a stream's extraction cursor (< FACT_EXTRACT_TRIGGER_MESSAGES, 32)
PENDING_PER_STREAM = 24
EXTRACTED_BEHIND = 16
FILLER = ["今天", "昨天", "最近", "其实", "感觉", "真的", "有点", "还是", "一起", "好像", "明天", "周末", "晚上", "早上"]
SCIENCE = ["月球", "太阳", "地球", "火星", "木星", "光合作用", "细胞", "DNA", "量子", "引力", "电磁波", "化学键", "火山", "地震",
           "长城", "故宫", "丝绸之路", "唐朝", "宋朝", "明朝", "黄河", "长江", "珠穆朗玛峰", "青藏高原", "熊猫", "银杏", "茶叶",
           "瓷器", "印刷术", "指南针", "造纸术", "火药", "京剧", "书法", "围棋", "中医", "针灸", "太极拳", "二十四节气", "春节"]
VERBS = ["位于", "是一种", "起源于", "含有", "影响", "属于", "形成于", "被称为", "发明于", "分布在"]


class RealText:
    """Chinese sentences of MemDaily (read from ../shared/data, never copied) for realistic vocabulary.

    Template sentences alone give a narrow vocabulary in which every term is common,
    which makes FTS5 rank far more rows than real chat text does.
    """

    def __init__(self, rng: random.Random) -> None:
        import json

        from bench.common import data_dir

        self.rng = rng
        sentences: list[str] = []
        for path in sorted((data_dir() / "memdaily").glob("*.json")):
            for trajectory in json.loads(path.read_text()):
                sentences += [m["message"] for m in trajectory["message_list"]]
        self.sentences = sorted(set(sentences))
        if not self.sentences:
            raise FileNotFoundError(f"no MemDaily sentences under {data_dir() / 'memdaily'}")

    def sentence(self) -> str:
        return self.rng.choice(self.sentences)


#: Synthetic facts: (upper bound of the roll, text maker, kind, slot); a roll takes the first row it is below.
FACT_SHAPES: list[tuple[float, Callable[[random.Random, str], str], str, str]] = [
    (0.15, lambda rng, name: f"{name}住在{rng.choice(CITIES)}", "身份", "居住地"),
    (0.25, lambda rng, name: f"{name}是一名{rng.choice(JOBS)}", "身份", "职业"),
    (0.45, lambda rng, name: f"{name}{rng.choice(['喜欢', '不喜欢', '特别爱吃', '讨厌'])}{rng.choice(FOODS)}", "偏好", ""),
    (0.6, lambda rng, name: f"{name}{rng.choice(['周末常去', '每天坚持', '最近迷上了'])}{rng.choice(HOBBIES)}", "习惯", ""),
    (0.7, lambda rng, name: f"{name}养了一只{rng.choice(PETS)}，叫{rng.choice(GIVEN)}{rng.choice(GIVEN)}", "关系", ""),
    (0.8, lambda rng, name: f"{name}的生日是{rng.randint(1, 12)}月{rng.randint(1, 28)}日", "日期", "生日"),
    (1.0, lambda rng, name: f"{name}下周要去{rng.choice(CITIES)}{rng.choice(EVENTS)}", "事件", ""),
]


def fact_text(rng: random.Random, name: str, real: RealText | None = None) -> tuple[str, str, str]:
    if real is not None and rng.random() < 0.5:  # half the facts: real self-disclosures, third person
        return real.sentence().replace("我", name, 1), "事件", ""
    roll = rng.random()
    _, make, kind, slot = next(shape for shape in FACT_SHAPES if roll < shape[0])  # random() < 1.0
    return make(rng, name), kind, slot


def message_text(rng: random.Random, real: RealText | None = None) -> str:
    if real is not None and rng.random() < 0.7:
        return real.sentence()
    parts = [rng.choice(FILLER), rng.choice(["我", "你", "我们", "他"]), rng.choice(["想", "去", "在", "觉得", "聊"]),
             rng.choice(TOPICS + FOODS + HOBBIES + CITIES), rng.choice(["吗", "了", "啊", "呢", "吧", ""])]
    if rng.random() < 0.5:
        parts += ["，", rng.choice(FILLER), rng.choice(TOPICS + EVENTS)]
    return "".join(parts)


def knowledge_text(rng: random.Random, i: int, real: RealText | None = None) -> str:
    if real is not None and rng.random() < 0.6:
        return f"{real.sentence()}{real.sentence()}（资料{i}）"
    a, b = rng.sample(SCIENCE, 2)
    return f"{a}{rng.choice(VERBS)}{b}相关的第{i}条资料，{rng.choice(FILLER)}{rng.choice(TOPICS)}"


def build(out: Path, scale: float = 1.0, seed: int = 7, dim: int = 512, real_text: bool = True) -> dict[str, int]:
    os.environ["MEMORY_DB"] = str(out)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["MEMORY_ENQUEUE_TASKS"] = "False"
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from memory.engine import decay
    from memory.engine.quantize import pack_float32, quantize_vector
    from memory.engine.similarity import exact_key
    from memory.engine.tokenize import index_tokens
    from memory.meta import meta_set
    from memory.models import EXTRACT_CURSOR_KEY
    from memory.search import lexical

    for suffix in ("", "-wal", "-shm"):
        Path(f"{out}{suffix}").unlink(missing_ok=True)
    call_command("migrate", verbosity=0)
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    real = None
    if real_text:
        try:
            real = RealText(rng)
        except FileNotFoundError as exc:  # the shared data is optional here: templates still work
            print(f"build_db: {exc}; using template sentences only", file=sys.stderr)
    n_persons, n_facts = int(2000 * scale), int(20000 * scale)
    n_knowledge, n_messages = int(25000 * scale), int(200000 * scale)
    n_episodes, n_edges = int(20000 * scale), int(100000 * scale)
    n_streams = max(4, n_persons // 10)
    now = 1_800_000_000_000
    day = 24 * decay.MS_PER_HOUR
    t0 = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cur:
        names = [rng.choice(SURNAMES) + rng.choice(GIVEN) + (rng.choice(GIVEN) if rng.random() < 0.6 else "") for _ in range(n_persons)]
        cur.executemany(
            "INSERT INTO persons(id, kind, display_name, first_seen_at) VALUES (%s, 'user', %s, %s)",
            [(i + 2, names[i], now - 400 * day) for i in range(n_persons)],
        )
        cur.executemany(
            "INSERT INTO identities(person_id, platform, external_id, display_name) VALUES (%s, 'bench', %s, %s)",
            [(i + 2, f"u{i}", names[i]) for i in range(n_persons)],
        )
        kinds = ["direct", "group"]
        cur.executemany(
            "INSERT INTO streams(id, platform, kind, external_id, display_name) VALUES (%s, 'bench', %s, %s, %s)",
            [(i + 2, kinds[i % 2], f"s{i}", f"会话{i}") for i in range(n_streams)],
        )
        # facts: ~10 per person, valid, mixed kinds and ages, frozen once faded but ~1 % due for the sweep
        fact_rows, seen = [], set()
        fid = 0
        while len(fact_rows) < n_facts:
            person = rng.randrange(n_persons) + 2
            text, kind, slot = fact_text(rng, names[person - 2], real)
            key = exact_key(text)
            if (person, key) in seen:
                continue
            seen.add((person, key))
            fid += 1
            hl = decay.half_life_for(kind)
            updated = now - rng.randrange(0, 200) * day
            strength = rng.uniform(0.3, 1.0)
            due = decay.freeze_due_at(strength, updated, hl)
            # what the sweeps of a live store left: faded facts are frozen, but ~1 % of all
            # facts faded since the last sweep and wait for the next one
            active = due > now or rng.random() < 0.03
            origin = rng.choice(["direct", "group", "legacy"])
            fact_rows.append(
                (fid, person, kind, text, key, strength, hl, updated, updated - day, 0, due, int(active), origin, slot)
            )
        cur.executemany(
            "INSERT INTO facts(id, person_id, kind, content, content_key, strength, half_life_hours, updated_at,"
            " created_at, hit_count, due_at, active, origin_kind, slot, tokens, source)"
            " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,'','bench')",
            fact_rows,
        )
        lexical.index_facts([(r[0], r[3], r[1]) for r in fact_rows])
        fact_vecs = nprng.standard_normal((n_facts, dim)).astype(np.float32)
        fact_vecs /= np.linalg.norm(fact_vecs, axis=1, keepdims=True)
        cur.executemany(
            "UPDATE facts SET embedding = %s, embedding_q8 = %s WHERE id = %s",
            [(pack_float32(v), quantize_vector(v), i + 1) for i, v in enumerate(fact_vecs)],
        )
        # knowledge with vectors
        k_rows = [(i + 1, knowledge_text(rng, i + 1, real)) for i in range(n_knowledge)]
        k_vecs = nprng.standard_normal((n_knowledge, dim)).astype(np.float32)
        k_vecs /= np.linalg.norm(k_vecs, axis=1, keepdims=True)
        tokens = [index_tokens(t) for _, t in k_rows]
        cur.executemany(
            "INSERT INTO knowledge(id, content, content_key, source, tokens, created_at, hit_count, embedding, embedding_q8)"
            " VALUES (%s,%s,%s,'bench',%s,%s,0,%s,%s)",
            [
                (i, t, exact_key(t), tokens[i - 1], now - day, pack_float32(k_vecs[i - 1]), quantize_vector(k_vecs[i - 1]))
                for i, t in k_rows
            ],
        )
        lexical.index_rows("knowledge_fts", k_rows)
        # messages and episodes as a worker that keeps up leaves a live store: each stream's messages
        # archived into its episodes but the newest PENDING_PER_STREAM (below the summarisation
        # trigger), and its extraction cursor EXTRACTED_BEHIND messages behind the newest (below the
        # extraction trigger). A worker started on this store has nothing due: the API bench's worker
        # does only what the measured traffic brings (not a backlog of 40,000 unsummarised messages).
        per_stream = n_messages // n_streams
        per_episodes = max(1, n_episodes // n_streams)
        msg_rows, episode_rows, cue_rows = [], [], []
        cursors: dict[str, int] = {}
        mid = eid = cid = 0
        for s in range(n_streams):
            stream_id = s + 2
            members = [rng.randrange(n_persons) + 2 for _ in range(6)]
            archived = max(0, per_stream - PENDING_PER_STREAM)
            for j in range(per_stream):
                mid += 1
                at = now - (per_stream - j) * 60_000
                if j == per_stream - 1 - EXTRACTED_BEHIND:
                    cursors[str(stream_id)] = mid
                episode = None
                if j < archived:
                    if j == 0 or j * per_episodes // archived > (j - 1) * per_episodes // archived:  # a new episode
                        eid += 1
                        topic = rng.choice(TOPICS)
                        episode_rows.append((eid, f"大家聊了{topic}和{rng.choice(FOODS)}，{names[members[0] - 2]}提到{rng.choice(EVENTS)}", at, at + 8 * 60_000, stream_id))
                        for _ in range(3):
                            cid += 1
                            cue = real.sentence()[:16] if real is not None and rng.random() < 0.6 else \
                                f"聊到{rng.choice(TOPICS + FOODS + HOBBIES + EVENTS)}的时候"
                            cue_rows.append((cid, eid, cue))
                    episode = eid
                role = "assistant" if j % 3 == 2 else "user"
                sender = None if role == "assistant" else rng.choice(members)
                msg_rows.append((mid, role, message_text(rng, real), at, episode, stream_id, sender))
        cur.executemany(
            "INSERT INTO episodes(id, kind, summary, started_at, ended_at, created_at, stream_id, needs_rebuild, source)"
            " VALUES (%s,'conversation',%s,%s,%s,%s,%s,0,'bench')",
            [(e, summ, a, b, b, st) for e, summ, a, b, st in episode_rows],
        )
        cur.executemany("INSERT INTO episode_cues(id, episode_id, cue) VALUES (%s,%s,%s)", cue_rows)
        stream_of = {e: st for e, _s, _a, _b, st in episode_rows}
        lexical.index_cues([(c, t, stream_of[e]) for c, e, t in cue_rows])
        # every message has its vector, as the embedding backfill leaves a live store (the turn's
        # context vectors and inspect's dense channel read them); written in chunks
        for start in range(0, len(msg_rows), 10_000):
            chunk = msg_rows[start:start + 10_000]
            m_vecs = nprng.standard_normal((len(chunk), dim)).astype(np.float32)
            m_vecs /= np.linalg.norm(m_vecs, axis=1, keepdims=True)
            cur.executemany(
                "INSERT INTO messages(id, role, content, created_at, episode_id, stream_id, sender_person_id,"
                " embedding, embedding_q8) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                [(*row, pack_float32(v), quantize_vector(v)) for row, v in zip(chunk, m_vecs, strict=True)],
            )
        lexical.index_messages([(r[0], r[2], r[5]) for r in msg_rows])
        # a fact about a person who speaks in some stream was heard in one of their messages, as the
        # extractor records it (the others came through the API without one): the ranking reads the
        # conversation around it (memory/selectors/told.py). Its own generator: the rest of the store
        # is the one it was before facts had sources.
        said: dict[int, list[int]] = {}
        for row in msg_rows:
            if row[6] is not None:
                said.setdefault(row[6], []).append(row[0])
        heard = random.Random(seed + 1)
        cur.executemany(
            "UPDATE facts SET source_message_id = %s WHERE id = %s",
            [(heard.choice(said[r[1]]), r[0]) for r in fact_rows if r[1] in said],
        )
        meta_set(EXTRACT_CURSOR_KEY, cursors)
        # association graph: nodes for facts, episodes, knowledge; edges mostly local (same person / neighbours)
        node_rows = [("fact", i) for i in range(1, n_facts + 1)]
        node_rows += [("episode", i) for i in range(1, len(episode_rows) + 1)]
        node_rows += [("knowledge", i) for i in range(1, n_knowledge + 1)]
        cur.executemany(
            "INSERT INTO memory_nodes(id, ref_kind, ref_id) VALUES (%s,%s,%s)",
            [(i + 1, k, r) for i, (k, r) in enumerate(node_rows)],
        )
        n_nodes = len(node_rows)
        edges = set()
        while len(edges) < n_edges:
            a = rng.randrange(n_nodes) + 1
            b = min(n_nodes, max(1, a + rng.randint(-50, 50))) if rng.random() < 0.8 else rng.randrange(n_nodes) + 1
            if a != b:
                edges.add((min(a, b), max(a, b)))
        cur.executemany(
            "INSERT INTO memory_edges(source_id, target_id, strength, updated_at, active) VALUES (%s,%s,%s,%s,1)",
            [(a, b, rng.choice([0.35, 0.5775, 0.725375, 0.82149]), now - rng.randrange(0, 90) * day) for a, b in edges],
        )
        # concept graph from knowledge keywords
        concepts = {c: i + 1 for i, c in enumerate(SCIENCE)}
        cur.executemany(
            "INSERT INTO knowledge_nodes(id, concept, created_at) VALUES (%s,%s,%s)",
            [(i, c, now) for c, i in concepts.items()],
        )
        pairs: dict[tuple[int, int], int] = {}
        for _i, text in k_rows:
            found = [concepts[c] for c in SCIENCE if c in text]
            for x in range(len(found)):
                for y in range(x + 1, len(found)):
                    key2 = (min(found[x], found[y]), max(found[x], found[y]))
                    pairs[key2] = pairs.get(key2, 0) + 1
        cur.executemany(
            "INSERT INTO knowledge_edges(source_id, target_id, strength, updated_at) VALUES (%s,%s,%s,%s)",
            [(a, b, float(n), now) for (a, b), n in pairs.items()],
        )
    with connection.cursor() as cur:
        cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cur.execute("ANALYZE")
    counts = {
        "persons": n_persons, "facts": n_facts, "knowledge": n_knowledge, "messages": len(msg_rows),
        "episodes": len(episode_rows), "cues": len(cue_rows), "edges": len(edges), "streams": n_streams,
        "build_seconds": round(time.perf_counter() - t0, 1), "now": now,
    }
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / ".cache" / "scale.sqlite3"))
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--templates-only", action="store_true", help="do not mix in MemDaily sentences")
    args = parser.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    print(build(Path(args.out), scale=args.scale, seed=args.seed, real_text=not args.templates_only))


if __name__ == "__main__":
    main()
