"""Offline, deterministic stand-ins for the LLM summariser and fact extractor.

Labelled ``heuristic`` wherever they are shown: they need no network and no
model, and they are deliberately conservative.

* ``HeuristicSummariser`` is extractive: sentences are scored by jieba TF-IDF
  keyword weight, the best ones are kept in their original order (about 120
  characters), and the cues are a few key phrases plus TextRank keywords.
* ``HeuristicExtractor`` reads only first-person statements made by user
  speakers ("我住在杭州", "我不喜欢香菜", "我妈是老师") and writes them in the
  third person with the speaker's display name ("小明住在杭州"). Other people
  are never detected by name (jieba's ``nr`` tag is unreliable in chat), so
  gossip about third parties yields nothing.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from memory.engine.extraction import EpisodeDraft, ExtractedFact, Extraction
from memory.providers import (
    MIN_DIALOGUE_CHARS,
    DialogueLine,
    Emit,
    KnownFact,
    Participant,
    clean_content,
    usable_lines,
)

__all__ = ["HeuristicExtractor", "HeuristicSummariser", "LABEL"]

LABEL = "heuristic"

_jieba_lock = threading.Lock()
_jieba_ready = False


def _analyse():
    """Return ``jieba.analyse`` with the project's jieba set-up, initialised once."""
    global _jieba_ready
    import jieba.analyse

    if not _jieba_ready:
        with _jieba_lock:
            if not _jieba_ready:
                # Importing tokenize points jieba's cache at a project-owned path
                # and silences its logger.
                from memory.engine import tokenize

                tokenize.warm_up()
                _jieba_ready = True
    return jieba.analyse


# --------------------------------------------------------------------------
# Shared text helpers

_SENTENCE_RE = re.compile(r"[^。！？!?；;…\n]+[。！？!?；;…]*")
_CLAUSE_SPLIT_RE = re.compile(r"[，,]")
_TRAILING_RE = re.compile(r"[\s~～…。！？!?；;，,、：:\"'“”‘’()（）\[\]【】啊呀呢吧哦嘛啦哈嘿噢喔哟]+$")
_QUESTION_RE = re.compile(r"(?:[?？]|(?:吗|么)[\s~～。！!?？]*)$")


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_RE.findall(text) if s.strip()]


def _trim(text: str) -> str:
    return _TRAILING_RE.sub("", text.strip())


def _speaker(line: DialogueLine, names: dict[str, str]) -> str:
    if line.role == "user" and line.speaker_ref is not None and line.speaker_ref in names:
        return names[line.speaker_ref]
    return (line.speaker_name or "").strip() or ("某人" if line.role == "user" else "助手")


# --------------------------------------------------------------------------
# Summariser

SUMMARY_MAX_CHARS = 120
MAX_CUES = 6
MIN_CUES = 3
_CUE_POS = ("ns", "n", "vn", "nz", "nt", "nw", "l", "i", "eng")
_GENERIC_WORDS = frozenset(
    "时候 东西 事情 问题 感觉 起来 需要 知道 觉得 可能 时间 今天 明天 昨天 现在 一下 这个 那个 什么 怎么 "
    "大家 我们 你们 他们 一起 真的 还是 就是 没有 已经 可以 不错 哈哈 哈哈哈 助手".split()
)


@dataclass(frozen=True)
class _Sentence:
    position: int
    speaker: str
    text: str


class HeuristicSummariser:
    """Extractive episode summary with jieba TF-IDF sentence scores and TextRank cues."""

    label = LABEL

    def __init__(self, max_chars: int = SUMMARY_MAX_CHARS) -> None:
        self.max_chars = max_chars

    def summarise(self, lines: Sequence[DialogueLine], participants: Sequence[Participant] = ()) -> EpisodeDraft | None:
        """Return a summary and 3–6 cues, or None when the body is under 40 characters."""
        names = {p.external_id: p.name for p in participants}
        items = usable_lines(lines, min_chars=4)  # lines of ≤ 3 characters say nothing
        body = "\n".join(f"{_speaker(line, names)}：{text}" for line, text in items)
        if len(body) < MIN_DIALOGUE_CHARS:
            return None

        sentences: list[_Sentence] = []
        for line, text in items:
            for part in _sentences(text):
                sentences.append(_Sentence(len(sentences), _speaker(line, names), part))
        plain = "\n".join(text for _, text in items)
        analyse = _analyse()
        weights = dict(analyse.extract_tags(plain, topK=40, withWeight=True))

        chosen = self._choose(sentences, weights)
        summary = self._render(chosen)
        if not summary:  # nothing but punctuation and emoji
            return None
        cues = self._cues(plain, [s.text for s in chosen], weights, analyse)
        return EpisodeDraft(summary=summary, cues=cues or [summary])

    def _score(self, sentence: _Sentence, weights: dict[str, float]) -> float:
        import jieba

        words = [w for w in jieba.cut(sentence.text) if w.strip()]
        if not words:
            return 0.0
        score = sum(weights.get(w, 0.0) for w in set(words)) / math.sqrt(len(words))
        if _QUESTION_RE.search(sentence.text):
            score *= 0.6  # a question states less than an answer
        return score

    def _choose(self, sentences: list[_Sentence], weights: dict[str, float]) -> list[_Sentence]:
        ranked = sorted(sentences, key=lambda s: (-self._score(s, weights), s.position))
        chosen: list[_Sentence] = []
        for candidate in ranked:
            trial = sorted([*chosen, candidate], key=lambda s: s.position)
            if len(self._render(trial)) <= self.max_chars:
                chosen = trial
        if not chosen and ranked:  # even the best sentence is too long: cut it
            best = ranked[0]
            room = self.max_chars - len(best.speaker) - 2
            chosen = [_Sentence(best.position, best.speaker, best.text[: max(room, 1)] + "…")]
        return chosen

    @staticmethod
    def _render(chosen: list[_Sentence]) -> str:
        parts: list[str] = []
        previous = None
        for s in chosen:
            text = s.text if s.text[-1] in "。！？!?；;…" else s.text + "。"
            # The name is only repeated when the speaker changes.
            parts.append(text if s.speaker == previous else f"{s.speaker}：{text}")
            previous = s.speaker
        return "".join(parts)

    @staticmethod
    def _cues(plain: str, chosen_texts: list[str], weights: dict[str, float], analyse) -> list[str]:
        import jieba

        def usable(word: str) -> bool:
            return len(word) >= 2 and word not in _GENERIC_WORDS and not word.isdigit()

        # Key phrases: runs of adjacent TF-IDF keywords inside the kept
        # sentences ("产品" + "经理" → "产品经理"), 3–6 characters long.
        phrases: dict[str, float] = {}
        for text in chosen_texts:
            run: list[str] = []
            for word in [*jieba.cut(text), ""]:
                if word and word in weights and usable(word):
                    run.append(word)
                    continue
                if len(run) >= 2:
                    phrase = "".join(run)
                    if 3 <= len(phrase) <= 6:
                        phrases[phrase] = max(phrases.get(phrase, 0.0), sum(weights[w] for w in run))
                run = []
        cues: list[str] = [p for p, _ in sorted(phrases.items(), key=lambda kv: -kv[1])[:2]]

        def add(word: str) -> None:
            if len(cues) < MAX_CUES and usable(word) and not any(word in c or c in word for c in cues):
                cues.append(word)

        for word in analyse.textrank(plain, topK=12, allowPOS=_CUE_POS):
            add(word)
        if len(cues) < MIN_CUES:
            for word in analyse.extract_tags(plain, topK=20, allowPOS=_CUE_POS):
                add(word)
                if len(cues) >= MIN_CUES:
                    break
        return cues


# --------------------------------------------------------------------------
# Extractor

# Discourse markers and time words that may come before the subject 我.
_DISCOURSE = r"(?:对了|其实|话说|说起来|顺便说一下|顺便说下|顺便|跟你说|跟你们说|告诉你|告诉你们|说实话|不过|但是|可是|所以|而且|然后|因为|嗯+|哈+|啊|诶|欸|哦|噢|嘿|emm+)"
_TIME = (
    r"(?:现在|目前|最近|今年|去年|明年|前年|下个?月|上个?月|这个?月|下周|上周|这周|下星期|上星期|"
    r"前几天|前段时间|过几天|过段时间|马上|以前|之前|原来|本来|从小|小时候)"
)
# Adverbs and auxiliaries allowed between 我 and the predicate.
_ADV = (
    r"(?:现在|目前|已经|刚刚|刚|也|还|都|就|一直|最近|平时|其实|真的|是真的|特别|非常|超级|超|很|挺|蛮|比较|最|"
    r"本来|以前|之前|原来|早就|终于|又|才|从小|从来|一向|向来|总是|经常|"
    r"今年|去年|明年|下个?月|上个?月|这个?月|下周|上周|这周|马上|即将|打算|准备|计划|决定|要|会|想|已)"
)
_SUBJECT_RE = re.compile(rf"^(?:{_DISCOURSE}[，,\s]*)*(?P<time>(?:{_TIME})*)我(?!们)(?P<rest>.*)$")
_ADV_RE = re.compile(rf"^(?P<adv>(?:{_ADV})*)(?P<pred>.*)$")

_FAMILY = (
    "爸爸妈妈|爸妈|父母|妈妈|爸爸|老婆|老公|媳妇|爱人|丈夫|妻子|女朋友|男朋友|对象|女儿|儿子|闺女|孩子|宝宝|"
    "哥哥|姐姐|弟弟|妹妹|姐夫|嫂子|妹夫|弟媳|爷爷|奶奶|外公|外婆|姥姥|姥爷|舅舅|阿姨|叔叔|姑姑|表哥|表姐|表弟|表妹|"
    "堂哥|堂姐|堂弟|堂妹|妈|爸|哥|姐|弟|妹"
)
_FAMILY_FULL = {"妈": "妈妈", "爸": "爸爸", "哥": "哥哥", "姐": "姐姐", "弟": "弟弟", "妹": "妹妹"}
_FAMILY_RE = re.compile(rf"^的?(?P<who>{_FAMILY})(?![们夫子])(?P<pred>.{{2,}})$")
_HAS_FAMILY_RE = re.compile(rf"^有(?:一|两|三|四|\d)?(?:个|位)?(?:{_FAMILY})")
_PET = r"(?:猫咪|猫|狗狗|狗|兔子|仓鼠|鹦鹉|金鱼|鱼|乌龟|龙猫|柯基|柴犬|金毛|哈士奇|泰迪|布偶|英短|橘猫)"
_PET_RE = re.compile(rf"^(?:家里?)?(?:养了|养着|养|有)(?:一|两|三|几|\d)?(?:只|条|个|头|匹)?[^，。]{{0,6}}?{_PET}")

_JOBS = (
    "大学生|研究生|博士生|硕士生|高中生|初中生|小学生|留学生|学生|程序员|工程师|架构师|老师|教师|教授|医生|护士|律师|"
    "设计师|会计|销售|运营|产品经理|项目经理|经理|公务员|厨师|司机|警察|记者|作家|编辑|演员|歌手|主播|翻译|"
    "研究员|科学家|摄影师|画家|快递员|外卖员|服务员|保安|店长|老板|创业者|自由职业者|自由职业|全职妈妈|全职爸爸|"
    "前端|后端|测试|运维|实习生"
)
_JOB_RE = re.compile(
    rf"^(?:是做|在做|是|作为|当了|当|做|的?(?:新的?)?(?:工作|职业)是(?:做)?)(?:一名|一个|一位|名|个|位)?"
    rf"(?P<job>[\u4e00-\u9fffA-Za-z]{{0,6}}?(?:{_JOBS}))(?:的|一枚)?$"
)
_RESIDENCE_RE = re.compile(
    r"^(?:家)?(?:住在|住|现居|居住在|定居在|定居|家住|家在|搬到了|搬到|搬去了|搬去|搬家到|搬回了|搬回)"
    r"(?P<place>[\u4e00-\u9fffA-Za-z0-9·]{1,15})"
)
_PLACE_CUT_RE = re.compile(
    r"(?:已经|好几|快|有|了|啦|啊|呀|呢|吧|哦|嘛|这边|那边|那里|这里|的时候|住|去|来|以后|之后|工作|上班|读书|上学)"
)
_NAME_RE = re.compile(
    r"^(?:叫|的名字是|名字是|名字叫|的名字叫|的昵称是|昵称是|网名是|网名叫|的网名是)(?P<name>[^\s，。！？,.!?]{1,12})"
)
_CALL_ME_RE = re.compile(r"(?:^|[你您大家们都可以就])叫我(?P<name>[^\s，。！？,.!?吧啊呀就]{1,8})")
_ALLERGY_RE = re.compile(r"^(?:对)?(?P<what>[\u4e00-\u9fffA-Za-z]{1,10}?)过敏")
_PREFERENCE_RE = re.compile(
    r"^(?P<verb>不太喜欢|不怎么喜欢|不喜欢|不爱吃|不爱喝|不爱|不吃|不喝|讨厌|受不了|喜欢|爱吃|爱喝|爱看|爱玩|爱听|爱)"
    r"(?P<what>.{1,30})$"
)
_STUDY_RE = re.compile(r"^(?:正在|在|开始|最近在|自学|报班)?学(?:习)?(?![校院生期年会过了到着])(?P<what>.{2,20})$")
_PHONE_RE = re.compile(
    r"(?:^|我的?)(?:手机号码|手机号|手机|电话号码|电话|联系方式)(?:是|为)?[：:\s]*(?P<num>\+?\d[\d\- ]{5,18}\d)"
)
_DATE = (
    r"(?:农历)?(?:(?:\d{4}|[零〇一二三四五六七八九]{4})年)?"
    r"(?:\d{1,2}|[一二三四五六七八九十]{1,3})月(?:\d{1,2}|[一二三四五六七八九十]{1,3})(?:日|号)?"
)
_BIRTHDAY_RES = (
    re.compile(rf"我的?生日(?:是|在)?(?:每年)?(?P<date>{_DATE})"),
    re.compile(rf"(?P<date>{_DATE})是我的?生日"),
    re.compile(rf"我(?:是)?(?:出生于|生于)?(?P<date>{_DATE})(?:出生|生)的?"),
    re.compile(rf"我(?:出生于|生于)(?P<date>{_DATE})"),
)
_PRONOUN_OBJECTS = frozenset("你 您 他 她 它 你们 他们 她们 大家 自己".split())
_NOT_ALLERGEN = frozenset("有点 有些 容易 比较 也 还 经常 严重 不 没".split())
# A sentence with one of these announces a change of an earlier fact (§3.14 supersedes).
_CHANGE_RE = re.compile(r"换|改成|改为|改叫|改名|不再|搬到|搬去|搬家|以前|之前|原来|现在|已经不|不.{0,6}了$")

_KNOWLEDGE_RE = re.compile(
    r"是一种|是一个|位于|发明了?|首都|含有|富含|起源于|源于|被称为|被誉为|属于|由.{1,10}组成|原产于|沸点|熔点|"
    r"平均寿命|距离地球|世界上最|是世界上"
)
_PERSONAL_RE = re.compile(r"我|你|您|咱|俺")


@dataclass(frozen=True)
class _Rule:
    kind: str
    slot: str
    content: str
    obj: str = ""  # the object, used to find a superseded slot-less fact


class HeuristicExtractor:
    """Rule-based extraction of first-person self-disclosures by user speakers."""

    label = LABEL

    def extract(
        self,
        lines: Sequence[DialogueLine],
        participants: Sequence[Participant],
        known_facts: Sequence[KnownFact] = (),
        *,
        emit: Emit | None = None,
    ) -> Extraction:
        """Return the facts and knowledge the rules find (possibly none).

        Only user lines whose ``speaker_ref`` is a participant can yield facts,
        always about that speaker (or, for 关系, the speaker's relative or pet).
        ``supersedes`` is set when the sentence announces a change (换 / 改成 /
        不再 / 搬到 / 以前 / 现在 …) and ``known_facts`` holds a fact of the same
        person with the same slot (or, for slot-less facts, about the same
        object). Facts identical to a known one are not repeated. ``emit`` is
        accepted for interface parity with the LLM extractor.
        """
        names = {p.external_id: p.name for p in participants}
        facts: list[ExtractedFact] = []
        knowledge: list[str] = []
        seen: set[tuple[str, str]] = {(k.person_ref, k.content) for k in known_facts}
        for line in lines:
            text = clean_content(line)
            if not text:
                continue
            person_ref = line.speaker_ref if line.role == "user" else None
            name = (names.get(person_ref) or line.speaker_name or "").strip() if person_ref in names else ""
            for sentence in _sentences(text):
                found = _facts_in_sentence(sentence, person_ref, name, known_facts) if name else []
                for fact in found:
                    if (fact.person_ref, fact.content) not in seen:
                        seen.add((fact.person_ref, fact.content))
                        facts.append(fact)
                if not found:
                    item = _knowledge(sentence)
                    if item and item not in knowledge:
                        knowledge.append(item)
        return Extraction(facts=facts, knowledge=knowledge)


def _facts_in_sentence(
    sentence: str, person_ref: str, name: str, known_facts: Sequence[KnownFact]
) -> list[ExtractedFact]:
    changing = _CHANGE_RE.search(_trim(sentence)) is not None
    rules = _sentence_rules(sentence, name)
    clauses = [c for c in (_trim(raw) for raw in _CLAUSE_SPLIT_RE.split(sentence)) if c]
    if clauses and re.search(r"[?？]\W*$", sentence):
        clauses.pop()  # the asking part of "我喜欢火锅，你呢？"
    continuing = False
    for clause in clauses:
        if _QUESTION_RE.search(clause):
            continuing = False
            continue
        rule = _clause_rule(clause, name, continuing)
        continuing = rule is not None and rule.kind != "关系"
        if rule is not None:
            rules.append(rule)
    return [
        ExtractedFact(person_ref, r.kind, r.content, r.slot, _superseded(r, person_ref, known_facts) if changing else 0)
        for r in rules
    ]


def _sentence_rules(sentence: str, name: str) -> list[_Rule]:
    """Phone numbers and birthdays, which may span a clause break or put 我 late."""
    rules = []
    if phone := _PHONE_RE.search(sentence):
        number = re.sub(r"[\s-]", "", phone.group("num"))
        rules.append(_Rule("身份", "手机号", f"{name}的手机号是{number}"))
    for pattern in _BIRTHDAY_RES:
        if birthday := pattern.search(sentence):
            rules.append(_Rule("日期", "生日", f"{name}的生日是{birthday.group('date')}"))
            break
    return rules


def _third_person(name: str, time: str, rest: str) -> str:
    """Put the speaker's name where 我 was (the leading 我 is already cut off)."""
    rest = rest.replace("我的", f"{name}的").replace("我", name)
    return f"{name}{time}{_trim(rest)}"[:60]


def _obj(text: str) -> str:
    return re.sub(r"[了的]+$", "", _trim(text))


def _clause_rule(clause: str, name: str, continuing: bool) -> _Rule | None:
    """The fact one clause states about its speaker, or None.

    ``continuing`` says the previous clause of the sentence was a statement by
    the speaker, so a clause without a subject ("也喜欢吃火锅") is theirs too.
    """
    time = ""
    m = _SUBJECT_RE.match(clause)
    if m:
        time, rest = m.group("time"), m.group("rest")
    elif continuing and not re.match(r"^[\u4e00-\u9fff]{1,3}(?:说|觉得|认为)", clause):
        rest = clause
    else:
        if (call := _CALL_ME_RE.search(clause)) and _trim(call.group("name")) != name:  # "你可以叫我小明"
            return _Rule("身份", "昵称", f"{name}的昵称是{_trim(call.group('name'))}")
        return None

    if m and (family := _FAMILY_RE.match(rest)):
        who = _FAMILY_FULL.get(family.group("who"), family.group("who"))
        return _Rule("关系", "", _third_person(name, time, f"的{who}{family.group('pred')}"), who)

    a = _ADV_RE.match(rest)
    pred = a.group("pred") if a else rest
    content = _third_person(name, time, rest)

    if r := _RESIDENCE_RE.match(pred):
        place = _PLACE_CUT_RE.split(r.group("place"), maxsplit=1)[0]
        if place:
            return _Rule("身份", "居住地", content, place)
    if r := _NAME_RE.match(pred):
        nick = _trim(r.group("name"))
        if nick and nick[0] not in "了过着他她你人" and nick not in ("外卖", name):
            return _Rule("身份", "昵称", f"{name}的名字是{nick}", nick)
    if (r := _CALL_ME_RE.search(clause)) and _trim(r.group("name")) != name:
        return _Rule("身份", "昵称", f"{name}的昵称是{_trim(r.group('name'))}")
    if r := _JOB_RE.match(pred):
        if re.match(r"^(?:新的?)?(?:工作|职业)", pred):  # "（我的）新工作是…"
            content = _third_person(name, time, "的" + pred)
        return _Rule("身份", "职业", content, r.group("job"))
    if (r := _ALLERGY_RE.match(pred)) and r.group("what") not in _NOT_ALLERGEN:
        return _Rule("身份", "", content, r.group("what"))
    if r := _PREFERENCE_RE.match(pred):
        what = _obj(r.group("what"))
        if what and what not in _PRONOUN_OBJECTS and what[0] not in "上过了的着":
            return _Rule("偏好", "", content, what.removeprefix("吃").removeprefix("喝") or what)
    if _PET_RE.match(pred) or _HAS_FAMILY_RE.match(pred):
        return _Rule("关系", "", content)
    if r := _STUDY_RE.match(pred):
        return _Rule("习惯", "", content, _obj(r.group("what")))
    return None


def _superseded(rule: _Rule, person_ref: str, known_facts: Sequence[KnownFact]) -> int:
    """The id of the known fact this one replaces, or 0."""
    mine = [k for k in known_facts if k.person_ref == person_ref and k.content != rule.content]
    if rule.slot:
        return max((k.id for k in mine if k.slot == rule.slot), default=0)
    if len(rule.obj) >= 2:
        return max((k.id for k in mine if not k.slot and rule.obj in k.content), default=0)
    return 0


def _knowledge(sentence: str) -> str | None:
    text = _trim(sentence)
    if not 8 <= len(text) <= 120 or _QUESTION_RE.search(sentence):
        return None
    if _PERSONAL_RE.search(text) or not _KNOWLEDGE_RE.search(text):
        return None
    return text
