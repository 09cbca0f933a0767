"""Offline, deterministic stand-ins for the LLM summariser and fact extractor.

Labelled ``heuristic`` wherever they are shown: they need no network and no
model, and they are deliberately conservative.

* ``HeuristicSummariser`` is extractive: sentences are scored by jieba TF-IDF
  keyword weight, the best ones are kept in their original order (about 120
  characters), and the cues are a few key phrases plus TextRank keywords.
* ``HeuristicExtractor`` reads statements made by user speakers and writes
  them in the third person with the speaker's display name: about themselves
  ("我住在杭州" → "小明住在杭州"), their relatives and colleagues ("张伟是我的
  表弟，其家乡是北京" → "小明的表弟是张伟", "小明的表弟张伟的家乡是北京"),
  another participant named as the subject ("小红住在上海", stored on 小红),
  events and plans ("论坛的地点是北京", "我下周要去广州出差"), possessions
  and opinions. People are recognised by relation words, by a name introduced
  in the batch or in a known fact, or — for personal attributes only — by a
  common surname (jieba's ``nr`` tag is unreliable in chat). Questions,
  conditionals, hearsay, quoted text and assistant lines yield nothing.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

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
    import jieba.analyse  # builds jieba's TF-IDF table (seconds): only when the heuristic provider runs

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
        import jieba  # heavy; loaded only when the heuristic provider runs

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
        import jieba  # heavy; loaded only when the heuristic provider runs

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
    r"(?:(?:这|下|上|本)?(?:周|星期)[一二三四五六日天]|这?周末|今天|明天|后天|昨天|今晚|明晚|"
    r"现在|目前|最近|今年|去年|明年|前年|下个?月|上个?月|这个?月|下周|上周|这周|下星期|上星期|"
    r"前几天|前段时间|过几天|过段时间|马上|以前|之前|原来|本来|从小|小时候)"
)
_TIME_ONLY_RE = re.compile(rf"^(?:{_TIME})+$")
# Adverbs and auxiliaries allowed between 我 and the predicate.
_ADV = (
    r"(?:现在|目前|已经|刚刚|刚|也|还|都|就|一直|最近|平时|其实|真的|是真的|更|特别|特(?=喜欢|爱|中意)|非常|超级|超|很|挺|蛮|比较|最|"
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
    r"^(?P<verb>不太喜欢|不怎么喜欢|不喜欢|不爱吃|不爱喝|不爱|不吃|不喝|讨厌|受不了|喜欢|中意|爱吃|爱喝|爱看|爱玩|爱听|爱)"
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
# A sentence with one of these announces a change of an earlier fact (docs/REFERENCE.md §14 supersedes).
_CHANGE_RE = re.compile(r"换|改成|改为|改叫|改名|不再|搬到|搬去|搬家|以前|之前|原来|现在|已经不|不.{0,6}了$")

_KNOWLEDGE_RE = re.compile(
    r"是一种|是一个|位于|发明了?|首都|含有|富含|起源于|源于|被称为|被誉为|属于|由.{1,10}组成|原产于|沸点|熔点|"
    r"平均寿命|距离地球|世界上最|是世界上"
)
_PERSONAL_RE = re.compile(r"我|你|您|咱|俺")

# --------------------------------------------------------------------------
# Other people, events and plans
#
# A clause about someone other than the speaker is attributed like this:
# * a participant of the batch named at the start ("小红住在上海") → that participant;
# * the speaker's relative, colleague or friend ("我表弟…", "张伟是我的表弟，其…",
#   a name introduced so earlier in the batch or in a known fact) → the speaker,
#   the third party named in the content ("小明的表弟张伟的家乡是北京");
# * a name that is not introduced (a common surname + one or two characters)
#   followed by a personal attribute ("王丽娟的联系电话是…") → the speaker, as
#   something the speaker knows about that person;
# * an event ("论坛的地点是北京", "我将要参加…，它的规模是…") → the speaker, kind 事件.
# Hearsay (听说, 他说), questions, conditionals and quoted text yield nothing.

_KIN = (
    "外甥女|外孙女|爸爸妈妈|爸妈|父母|父亲|母亲|妈妈|爸爸|老婆|老公|媳妇|丈夫|妻子|女朋友|男朋友|女儿|儿子|闺女|"
    "哥哥|姐姐|弟弟|妹妹|姐夫|嫂子|妹夫|弟媳|爷爷|奶奶|外公|外婆|姥姥|姥爷|舅舅|舅妈|阿姨|叔叔|婶婶|伯伯|伯父|"
    "伯母|姑姑|姑父|姑妈|姨妈|姨父|表哥|表姐|表弟|表妹|堂哥|堂姐|堂弟|堂妹|岳父|岳母|公公|婆婆|侄子|侄女|外甥|"
    "孙子|孙女|外孙"
)
_SOCIAL = (
    "好朋友|合伙人|同事|上司|领导|老板|下属|同学|室友|舍友|朋友|闺蜜|哥们|兄弟|邻居|师傅|徒弟|导师|老师|客户|搭档|"
    "男友|女友|前男友|前女友"
)
_KIN_SHORT = "孩子|宝宝|对象|爱人|妈|爸|哥|姐|弟|妹"
_RELATION = f"{_KIN}|{_SOCIAL}|{_KIN_SHORT}"
# Words that mean "my …" even without 我 at the start of a clause ("舅妈喜欢钓鱼").
_BARE_RELATION = f"{_KIN}|同事|上司|领导|下属|室友|舍友|闺蜜"
_REL_FULL = {**_FAMILY_FULL, "女友": "女朋友", "男友": "男朋友"}
_MY = r"(?:我们家的?|我家的?|我的?)"
_IS_MY_RE = re.compile(rf"^(?P<who>[\u4e00-\u9fff·]{{2,4}}?)是{_MY}(?P<rel>{_RELATION})(?![们子])(?P<rest>.*)$")
_MY_NAMED_RE = re.compile(
    rf"^(?:我有(?:一个|一位|个|位)?|{_MY})(?P<rel>{_RELATION})(?:的名字)?(?:是|叫|名叫|叫做)(?P<who>[\u4e00-\u9fff·]{{2,4}})$"
)
_MY_RELATION_RE = re.compile(
    rf"^(?P<time>(?:{_TIME})*){_MY}(?P<rel>{_RELATION})(?![们圈子])(?:他们|她们)?(?P<pred>.+)$"
)
_BARE_RELATION_RE = re.compile(rf"^(?P<time>)(?P<rel>{_BARE_RELATION})(?![们圈子])(?:他们|她们)?(?P<pred>.+)$")
_KIN_RE = re.compile(f"{_KIN}|{_KIN_SHORT}")
_SURNAMES = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈姚卢"
    "姜崔钟谭陆汪范金石廖贾夏韦付傅方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤欧阳"
)
_NOT_NAME_CHARS = set("的是在了我你他她它们这那有和也都就还很说要会喜欢今年岁")
_PRONOUN_START = re.compile(r"^(?:我|你|您|他|她|它|咱|俺|大家|人家|别人|谁|这|那|其)")

_DATE_VALUE = rf"(?:{_DATE}|\d{{4}}[-/.]\d{{1,2}}[-/.]\d{{1,2}})"
_EDU = "博士后|博士|硕士|研究生|本科|大专|专科|中专|高中|初中|小学"
_PLACE = r"[\u4e00-\u9fffA-Za-z·]{2,15}"
_JOB_TAIL = rf"(?:{_JOBS}|工人|队长|主任|主管|总监|助理|员|师|家|生|长)"


@dataclass(frozen=True)
class _Attr:
    """A personal attribute recognised in a predicate."""

    kind: str
    attr: str  # the slot name, '' for multi-valued attributes
    value: str


# (pattern over the predicate that follows the subject, kind, attribute). First match wins.
_ATTRIBUTES: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(p), kind, attr)
    for p, kind, attr in (
        (r"^的?(?:名字|姓名|全名)(?:就|也)?(?:是|叫)(?P<v>[\u4e00-\u9fff·]{2,5})$", "关系", "名字"),
        (r"^(?:名叫|叫做|叫)(?P<v>[\u4e00-\u9fff·]{2,5})$", "关系", "名字"),
        (rf"^的?(?:生日|出生日期|过生日)(?:是在|是|在|为)?(?:每年)?(?:的)?(?P<v>{_DATE_VALUE})", "日期", "生日"),
        (rf"^(?:是)?(?P<v>{_DATE_VALUE})(?:出生|生)的?$", "日期", "生日"),
        (r"^(?:的年龄|的年纪|年龄|年纪)(?:是|有|为)?(?P<v>\d{1,3}|[一二三四五六七八九十]{1,3})(?:周)?岁", "身份", "年龄"),
        (r"^(?:现在|目前|今年|才|已经|都|已|刚)*(?:有)?(?P<v>\d{1,3}|[一二三四五六七八九十]{1,3})(?:周)?岁(?:了|啦)?$", "身份", "年龄"),
        (r"^的?(?:身高)(?:是|有|才|只有|为|就)?(?P<v>\d{2,3}(?:\.\d+)?\s*(?:厘米|公分|cm|CM)|[12](?:\.\d+)?米\d*|一米[一二三四五六七八九]+)",
         "身份", "身高"),
        (r"^的?(?:联系电话|联系方式|电话号码|电话号|手机号码|手机号|电话|手机)(?:是|为)?[：:\s]*(?P<v>\+?\d[\d\- ]{5,18}\d)$",
         "身份", "电话"),
        (r"^的?(?:邮箱地址|电子邮箱|邮件地址|邮箱|email|Email|E-mail)(?:是|为)?[：:\s]*(?P<v>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)$",
         "身份", "邮箱"),
        (rf"^的?(?:家乡|老家|籍贯)(?:是在|是|在)?(?P<v>{_PLACE})$", "身份", "家乡"),
        (rf"^是(?P<v>{_PLACE})人$", "身份", "家乡"),
        (rf"^的?(?:工作地点|工作地|工作城市|上班的地方)(?:是在|是|在)?(?P<v>{_PLACE})$", "身份", "工作地"),
        (rf"^(?:现在|目前|一直)?在(?P<v>{_PLACE}?)(?:上班|工作)(?:了|呢|啦)?$", "身份", "工作地"),
        (r"^的?(?:工作单位|单位|公司)(?:是|叫|名叫|叫做)(?P<v>[\u4e00-\u9fffA-Za-z0-9·（）()]{2,30})$", "身份", "单位"),
        (rf"^的?(?:最高学历|学历|教育背景|文化程度)(?:挺高的|不高)?(?:是|为|就是)?(?:个)?(?P<v>{_EDU})", "身份", "学历"),
        (rf"^(?:是|就|才|只有|只是)?(?P<v>{_EDU})(?:学历|毕业)", "身份", "学历"),
        (r"^的?(?:职业|工作)是(?:做|当)?(?:一名|一个|一位|个|名)?(?P<v>[\u4e00-\u9fffA-Za-z]{2,12})$", "身份", "职业"),
        (rf"^(?:现在|目前)?(?:是|当)(?:一名|一个|一位|个|名)?(?P<v>[\u4e00-\u9fffA-Za-z]{{0,8}}?{_JOB_TAIL})的?$",
         "身份", "职业"),
        (r"^(?:现在|目前)?是(?:干|做|当|送|搞|开|跑)(?P<v>[\u4e00-\u9fff]{1,8})的$", "身份", "职业"),
        (r"^的?(?:兴趣爱好|爱好|兴趣)(?:是|就是)(?P<v>[\u4e00-\u9fffA-Za-z]{1,15})$", "偏好", ""),
    )
)
_AFTER_OWNER_NEEDS_DE = re.compile(r"^(?:名字|姓名|生日|年龄|年纪|身高|电话|手机|邮箱|家乡|老家|籍贯|工作|单位|公司|学历|教育背景|职业|兴趣|爱好)")

# Event attributes: "金融科技论坛的地点是北京", "…，它的规模是九千人".
_EVENT_ATTR = r"举办时间|举办地点|开始时间|结束时间|持续时间|主要内容|时间|地点|规模|内容|主题|日期|费用|门票"
_EVENT_RE = re.compile(
    rf"^(?P<event>[^，,。：:“”\"、]{{2,24}}?)的(?P<attr>{_EVENT_ATTR})(?P<verb>是|为|在|定在|改到|改在|改成)(?P<v>.+)$"
)
_EVENT_CONT_RE = re.compile(rf"^(?:它|其|该活动|这个活动|这次活动)的(?P<attr>{_EVENT_ATTR})(?P<verb>是|为|在|定在)(?P<v>.+)$")
_JOIN_RE = re.compile(
    r"^(?P<mod>(?:也|还|都|马上|即将|就要|将要|将|要|会|打算|准备|计划|想|下周|下个?月|明天|后天|周末)*)"
    r"(?P<verb>参加|出席|参与)(?P<done>了|过)?(?P<de>的)?(?P<event>[^，,。]{2,24})$"
)
_LIKED_RE = re.compile(
    r"^(?P<what>[^，,。我你他她它]{2,24}?)是我(?:的(?:最爱|心头好)|(?:很|挺|最|特别|非常|超)?(?:喜欢|爱用|爱|中意)的)"
)
_NOT_EVENT = re.compile(r"^(?:这|那|今天|明天|昨天|现在|时间|天气|我|你|您|他|她|它|咱|俺|大家|人家|别人|谁|其)")

# Opinions about things and places: "亚瑟士这双鞋真不错", "荔枝公园真是闹中取静的好地方".
_EVAL = (
    r"不错|好用|好吃|好喝|好看|好玩|好听|棒|舒服|舒适|给力|划算|实用|满意|方便|贴心|流畅|漂亮|清新|安静|"
    r"好地方|好去处|难用|难吃|难喝|难看|差劲|失望|糟糕|太贵|贵了点"
)
_OPINION_RE = re.compile(
    rf"^(?P<what>[^，,。我你他她它咱]{{2,24}}?)(?:这地方|那地方|这款|这个)?(?:[^，,。]{{0,4}}?)"
    rf"(?:真心|真的|真是|真|确实|实在|特别|挺|太|很|超级|超|蛮|非常|相当|是个|是)[^，,。]{{0,10}}?(?:{_EVAL})"
)
_NOT_OPINION_SUBJECT = re.compile(
    r"^(?:今天|明天|昨天|天气|这天|心情|身体|感觉|最近|现在|时间|这里|这边|那里|那边|这样|这么|这种|那种|这个人|"
    r"人|东西|生活|日子|工作|大家|感觉|就是|但是|不过|而且|可是|只是|唯一|有一点|有点|总的来说|总体)"
)

# The speaker's own doings: visits, possessions, plans.
_ITEM = (
    "扫地机器人|空气净化器|笔记本电脑|手机|电脑|笔记本|平板|相机|耳机|手表|汽车|电动车|自行车|车|洗衣机|冰箱|空调|电视机|电视|"
    "吸尘器|洗碗机|热水器|电饭煲|微波炉|烤箱|净化器|运动鞋|跑鞋|鞋子|鞋|口红|唇膏|香水|护肤品|精华液|面霜|眼镜|背包|"
    "钱包|键盘|游戏机"
)
_VISIT_RE = re.compile(
    r"^(?P<time>(?:刚刚|刚才|今天|昨天|前天|上周|周末|之前|上次|早上|下午|晚上)*)"
    r"(?:去|路过|经过|参观|逛|到|游览|玩)(?:了|过)?的(?:那个|那家|那座|这个|那)?(?P<what>[\u4e00-\u9fff]{0,4})"
    r"(?:是|叫)(?:一家|一个|个|一座)?(?P<v>[\u4e00-\u9fffA-Za-z0-9·]{2,20})$"
)
_WENT_RE = re.compile(
    r"^(?P<time>(?:刚刚|刚才|今天|昨天|前天|上周|周末|之前|上次|早上|下午|晚上)*)"
    r"(?:去了|去过|路过了?|经过了?|参观了|逛了|游览了|到过)(?!的)(?P<v>[\u4e00-\u9fffA-Za-z0-9·]{2,20})$"
)
_OWN_ITEM_RE = re.compile(
    rf"^(?:的|家的|家里的|们家的|家里)(?P<item>{_ITEM})(?:用的)?是(?P<v>[\u4e00-\u9fffA-Za-z0-9·\-]{{2,30}})$"
)
_USE_ITEM_RE = re.compile(
    r"^(?:家里?|家里面)?(?:平时|现在|一直|最近)?(?:用|穿|戴|开|骑)(?:的|着的)(?P<item>[\u4e00-\u9fff]{0,8}?)"
    r"是(?P<v>[\u4e00-\u9fffA-Za-z0-9·\-]{2,30})$"
)
_ITEM_USE_RE = re.compile(rf"^的?(?P<item>{_ITEM})用的(?:是)?(?P<v>[\u4e00-\u9fffA-Za-z0-9·\-]{{2,30}})$")
_FUTURE = r"明天|后天|大后天|下周|下星期|下个?月|周末|这周末|月底|年底|过几天|过段时间|国庆|春节|暑假|寒假|\d{1,2}月\d{1,2}[日号]|周[一二三四五六日天]"
_PLAN_RE = re.compile(
    rf"^(?P<when>(?:{_FUTURE}|打算|准备|计划|将要|要|会|想|也|还|就)*)"
    r"(?:去|到|回|飞)(?P<where>[\u4e00-\u9fffA-Za-z]{2,12})"
)
_PLAN_CUE = re.compile(rf"{_FUTURE}|打算|准备|计划|将要")
_TRIVIAL = re.compile(r"^(?:睡觉|吃饭|洗澡|厕所|上厕所|休息|上班|下班|买菜|学校|公司|单位|家|外面|楼下)")

# Clauses that state nothing: conditionals (and all that follows), questions, hearsay.
_HYPOTHETICAL_RE = re.compile(r"如果|假如|要是|假设|假使|万一|的话|梦见|梦到|想象|但愿|希望")
_ASKING_RE = re.compile(r"什么|哪|谁|多少|怎么|为什么|为啥|是否|是不是|有没有|(?<![前这好])几(?=[月号点岁个天年])")
_HEARSAY_RE = re.compile(r"听说|据说|听人说|传说|(?:他|她|他们|她们|人家|别人|大家|都)说|说(?:他|她|它|我)|说[:：]")
_QUOTE_RE = re.compile(r"[“”\"「」『』]")


@dataclass(frozen=True)
class _Rule:
    kind: str
    slot: str
    content: str
    obj: str = ""  # the object, used to find a superseded slot-less fact
    person_ref: str = ""  # whose fact it is; '' = the speaker's


@dataclass(frozen=True)
class _Who:
    """The subject of a clause when it is not the speaker."""

    person_ref: str  # whose fact it is: the speaker (for their circle) or a participant
    owner: str  # how the content names the subject: "小明的表弟张伟", "小红", "王丽娟"
    key: str = ""  # slot prefix ("张伟", "表弟"); '' for a participant in their own right
    event: str = ""  # the event's name when the subject is an event
    kin: bool = False  # a family member: predicates without a recognised attribute still count


_SPEAKER = _Who(person_ref="", owner="")  # the speaker is the sentence's subject so far


class _Batch:
    """What one extraction call knows about the people and events it hears of."""

    def __init__(self, participants: Sequence[Participant], known_facts: Sequence[KnownFact]) -> None:
        self.names = {p.external_id: p.name for p in participants}
        self.by_name = {p.name: p.external_id for p in participants if len(p.name or "") >= 2}
        self.people: dict[str, _Who] = {}  # a third party's name → how they are referred to
        self.events: dict[str, str] = {}  # an event's name → "小明将要参加的…"
        for known in known_facts:
            name = self.names.get(known.person_ref, "")
            if not name or not known.content.startswith(name):
                continue
            rest = known.content[len(name):]
            if m := re.fullmatch(rf"的(?P<rel>{_RELATION})(?:是|叫)(?P<who>[\u4e00-\u9fff·]{{2,4}})", rest):
                self.add_person(known.person_ref, name, m.group("rel"), m.group("who"))
            elif m := _JOIN_RE.match(rest):
                self.add_event(m.group("event"), f"{name}{m.group('mod')}{m.group('verb')}的")

    def add_person(self, person_ref: str, speaker: str, rel: str, who: str) -> _Who:
        rel = _REL_FULL.get(rel, rel)
        subject = _Who(person_ref, f"{speaker}的{rel}{who}", key=who, kin=bool(re.fullmatch(_KIN, rel)))
        if who not in self.by_name:
            self.people[who] = subject
        return subject

    def add_event(self, event: str, phrase: str) -> None:
        self.events.setdefault(event, phrase)


class HeuristicExtractor:
    """Rule-based extraction of statements by user speakers about themselves, their circle and their plans."""

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

        Only user lines whose ``speaker_ref`` is a participant can yield facts.
        A fact is about the speaker, about another participant named as the
        subject ("小红住在上海"), or — for the speaker's relatives, colleagues,
        other named people and events — stored on the speaker with the third
        party named in the content ("小明的表弟张伟的家乡是北京"). Names
        introduced earlier in the batch ("张伟是我的表弟") or in a known fact
        are recognised later in the batch. ``supersedes`` is set when the
        sentence announces a change (换 / 改成 / 不再 / 搬到 / 以前 / 现在 …)
        and ``known_facts`` holds a fact of the same person with the same slot
        (or, for slot-less facts, about the same object). Facts identical to a
        known one are not repeated. ``emit`` is accepted for interface parity
        with the LLM extractor.
        """
        batch = _Batch(participants, known_facts)
        facts: list[ExtractedFact] = []
        knowledge: list[str] = []
        seen: set[tuple[str, str]] = {(k.person_ref, k.content) for k in known_facts}
        for line in lines:
            text = clean_content(line)
            if not text:
                continue
            person_ref = line.speaker_ref if line.role == "user" else None
            name = (batch.names.get(person_ref) or line.speaker_name or "").strip() if person_ref in batch.names else ""
            for position, sentence in enumerate(_sentences(text)):
                found = (
                    _facts_in_sentence(sentence, person_ref, name, known_facts, batch, opening=position == 0)
                    if name
                    else []
                )
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
    sentence: str,
    person_ref: str,
    name: str,
    known_facts: Sequence[KnownFact],
    batch: _Batch | None = None,
    *,
    opening: bool = True,
) -> list[ExtractedFact]:
    """The facts of one sentence; ``opening`` says it is the first sentence of its message."""
    batch = batch or _Batch([Participant(person_ref, name)], known_facts)
    changing = _CHANGE_RE.search(_trim(sentence)) is not None
    rules = [] if _QUOTE_RE.search(sentence) else _sentence_rules(sentence, name)
    clauses = [c for c in (_trim(raw) for raw in _CLAUSE_SPLIT_RE.split(sentence)) if c]
    if (m := _EVENT_RE.match(_trim(sentence))) and m.group("attr") in ("主要内容", "内容"):
        clauses = [_trim(sentence)]  # the content of an event runs over several clauses
    if clauses and re.search(r"[?？]\W*$", sentence):
        clauses.pop()  # the asking part of "我喜欢火锅，你呢？"
    for i in range(len(clauses) - 1, 0, -1):
        if _TIME_ONLY_RE.match(clauses[i - 1]):  # "这周日，我老婆在家做大餐": the time belongs to what follows
            clauses[i - 1 : i + 1] = [clauses[i - 1] + clauses[i]]
    subject: _Who | None = None
    for position, clause in enumerate(clauses):
        if _HYPOTHETICAL_RE.search(clause):
            break  # a condition and its consequence state nothing
        if _QUESTION_RE.search(clause) or _ASKING_RE.search(clause) or _HEARSAY_RE.search(clause):
            subject = None
            continue
        if _QUOTE_RE.search(clause):
            subject = None
            continue
        other = _other_clause(clause, person_ref, name, subject, batch, first=opening and position == 0)
        if other is not None:
            subject, found = other
            rules.extend(found)
            continue
        rule = _clause_rule(clause, name, subject is _SPEAKER)
        subject = _SPEAKER if rule is not None and rule.kind != "关系" else None
        if rule is not None:
            rules.append(rule)
    facts = []
    for r in rules:
        ref = r.person_ref or person_ref
        facts.append(ExtractedFact(ref, r.kind, r.content, r.slot, _superseded(r, ref, known_facts) if changing else 0))
    return facts


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


def _place(m: re.Match[str]) -> str | None:
    """The place a residence names, cut before what follows it ("杭州已经三年了" → "杭州"); None if none is left."""
    return _PLACE_CUT_RE.split(m.group("place"), maxsplit=1)[0] or None


def _liked(m: re.Match[str]) -> str | None:
    """What a preference is about ("吃火锅" → "火锅"); None for a pronoun or a grammatical leftover."""
    what = _obj(m.group("what"))
    if not what or what in _PRONOUN_OBJECTS or what[0] in "上过了的着":
        return None
    return what.removeprefix("吃").removeprefix("喝") or what


class _Clause(NamedTuple):
    """A clause by the speaker: ``rest`` follows 我 (and the time words before it), ``pred`` follows the adverbs."""

    text: str
    name: str
    time: str
    rest: str
    pred: str


@dataclass(frozen=True)
class _Says:
    """A rule for what a clause states about its speaker.

    ``pattern`` is matched at the start of the predicate (searched in the whole clause
    with ``anywhere``); ``obj`` gives the fact's object from the match, or None when the
    rule does not apply after all; ``content`` writes the fact from the clause and the
    object (default: the clause in the third person).
    """

    pattern: re.Pattern[str]
    kind: str
    slot: str
    obj: Callable[[re.Match[str], _Clause], str | None] = lambda m, c: ""
    content: Callable[[_Clause, str], str] | None = None
    anywhere: bool = False

    def rule(self, clause: _Clause) -> _Rule | None:
        m = self.pattern.search(clause.text) if self.anywhere else self.pattern.match(clause.pred)
        if m is None or (obj := self.obj(m, clause)) is None:
            return None
        content = self.content(clause, obj) if self.content else _third_person(clause.name, clause.time, clause.rest)
        return _Rule(self.kind, self.slot, content, obj)


def _nickname(m: re.Match[str], clause: _Clause) -> str | None:
    nick = _trim(m.group("name"))
    return nick if nick != clause.name else None


def _own_name(m: re.Match[str], clause: _Clause) -> str | None:
    nick = _trim(m.group("name"))
    return nick if nick and nick[0] not in "了过着他她你人" and nick not in ("外卖", clause.name) else None


def _job_content(clause: _Clause, job: str) -> str:
    if re.match(r"^(?:新的?)?(?:工作|职业)", clause.pred):  # "（我的）新工作是…"
        return _third_person(clause.name, clause.time, "的" + clause.pred)
    return _third_person(clause.name, clause.time, clause.rest)


#: "你可以叫我小明": a nickname, wherever it stands in the clause.
_CALL_ME = _Says(
    _CALL_ME_RE, "身份", "昵称", obj=_nickname, content=lambda c, nick: f"{c.name}的昵称是{nick}", anywhere=True
)
#: What a speaker says about themselves, tried in order after a family member at the start: first match wins.
_SPEAKER_RULES: tuple[_Says, ...] = (
    _Says(_RESIDENCE_RE, "身份", "居住地", obj=lambda m, c: _place(m)),
    _Says(_NAME_RE, "身份", "昵称", obj=_own_name, content=lambda c, nick: f"{c.name}的名字是{nick}"),
    _CALL_ME,
    _Says(_JOB_RE, "身份", "职业", obj=lambda m, c: m.group("job"), content=_job_content),
    _Says(_ALLERGY_RE, "身份", "", obj=lambda m, c: None if m.group("what") in _NOT_ALLERGEN else m.group("what")),
    _Says(_PREFERENCE_RE, "偏好", "", obj=lambda m, c: _liked(m)),
    _Says(_PET_RE, "关系", ""),
    _Says(_HAS_FAMILY_RE, "关系", ""),
    _Says(_STUDY_RE, "习惯", "", obj=lambda m, c: _obj(m.group("what"))),
)


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
        return _CALL_ME.rule(_Clause(clause, name, "", "", ""))

    if m and (family := _FAMILY_RE.match(rest)):
        who = _FAMILY_FULL.get(family.group("who"), family.group("who"))
        return _Rule("关系", "", _third_person(name, "", f"的{who}{time}{family.group('pred')}"), who)

    a = _ADV_RE.match(rest)
    said = _Clause(clause, name, time, rest, a.group("pred") if a else rest)
    for says in _SPEAKER_RULES:
        if (rule := says.rule(said)) is not None:
            return rule
    return _more_of_the_speaker(rest, said.pred, name, time, _third_person(name, time, rest))


def _more_of_the_speaker(rest: str, pred: str, name: str, time: str, content: str) -> _Rule | None:
    """Attributes, possessions, visits, opinions and plans of the speaker."""
    attr = _attribute(rest) or _attribute(pred)
    # names, phone numbers and birthdays of the speaker have their own rules above
    if attr is not None and attr.attr not in ("名字", "电话", "生日"):
        return _Rule(attr.kind, attr.attr, _attach(name, rest, name) if rest.startswith("的") else content, attr.value)
    if (r := _OWN_ITEM_RE.match(rest)) or (r := _ITEM_USE_RE.match(rest)):
        return _Rule("身份", _item_slot(r.group("item")), content, r.group("v"))
    if r := _USE_ITEM_RE.match(pred):
        item = _item_slot(r.group("item"))
        return _Rule("身份" if item else "习惯", item, content, r.group("v"))
    if (r := _VISIT_RE.match(pred)) or (r := _WENT_RE.match(pred)):
        return _Rule("事件", "", content, r.group("v"))
    if (r := re.match(r"^(?:觉得|认为)(?P<x>.+)$", pred)) and (opinion := _opinion(r.group("x"))):
        return _Rule("偏好", "", _third_person(name, time, rest), opinion)
    if (r := _PLAN_RE.match(pred)) and _PLAN_CUE.search(time + rest) and not _TRIVIAL.match(r.group("where")):
        return _Rule("事件", "", content, _obj(r.group("where")))
    return None


def _item_slot(item: str) -> str:
    """The slot of a possession: the item's name, two to six characters ("车" → "汽车")."""
    item = {"车": "汽车", "鞋": "鞋子"}.get(item, item)
    return item if 2 <= len(item) <= 6 else ""


def _attribute(pred: str) -> _Attr | None:
    """The personal attribute a predicate states ("的家乡是北京", "今年37岁"), or None."""
    pred = _trim(pred)
    for pattern, kind, attr in _ATTRIBUTES:
        if m := pattern.match(pred):
            value = _trim(m.group("v"))
            if attr in ("家乡", "工作地"):
                value = re.sub(r"[的人]$", "", _PLACE_CUT_RE.split(value, maxsplit=1)[0])
                if len(value) < 2:
                    continue
            return _Attr(kind, attr, value)
    a = _ADV_RE.match(pred)
    if a and (m := _PREFERENCE_RE.match(a.group("pred"))) and (what := _liked(m)):
        return _Attr("偏好", "", what)
    if a and (m := _RESIDENCE_RE.match(a.group("pred"))) and (place := _place(m)):
        return _Attr("身份", "居住地", place)
    return None


def _attach(owner: str, pred: str, speaker: str) -> str:
    """``owner`` + the predicate, pronouns dropped and 我 put in the third person."""
    pred = re.sub(r"^(?:其|他们|她们|他|她)", "", _trim(pred))
    pred = pred.replace("我", speaker)
    joint = "的" if _AFTER_OWNER_NEEDS_DE.match(pred) else ""
    return f"{owner}{joint}{pred}"[:80]


def _slot(subject: _Who, attr: str) -> str:
    slot = f"{subject.key}{attr}" if attr and subject.key else attr
    return slot if len(slot) <= 6 else ""


def _about(subject: _Who, pred: str, speaker: str) -> list[_Rule] | None:
    """Facts a predicate states about ``subject``; None when it states nothing recognisable."""
    attr = _attribute(pred)
    if attr is None:
        return None
    if attr.attr == "名字":
        if attr.value in subject.owner:
            return []  # "张伟的名字就是张伟"
        return [_Rule("关系", "", _attach(subject.owner, pred, speaker), attr.value, subject.person_ref)]
    return [_Rule(attr.kind, _slot(subject, attr.attr), _attach(subject.owner, pred, speaker), attr.value,
                  subject.person_ref)]


def _looks_like_name(text: str) -> bool:
    return (
        2 <= len(text) <= 4
        and (text[0] in _SURNAMES or text[0] in "小老阿")
        and not set(text) & _NOT_NAME_CHARS
        and re.fullmatch(r"[\u4e00-\u9fff·]+", text) is not None
    )


def _other_clause(
    clause: str, person_ref: str, name: str, subject: _Who | None, batch: _Batch, *, first: bool = False
) -> tuple[_Who | None, list[_Rule]] | None:
    """``(subject, rules)`` when the clause is about someone or something other than the speaker, else None."""
    clause = re.sub(rf"^(?:{_DISCOURSE}[，,\s]*)+", "", clause)
    if not clause:
        return None
    # "张伟是我的表弟" — a relation, and the subject of what follows ("，其家乡是北京")
    if m := _IS_MY_RE.match(clause):
        who, rel = m.group("who"), _REL_FULL.get(m.group("rel"), m.group("rel"))
        if _PRONOUN_START.match(who) or who == name:
            return _Who(person_ref, f"{name}的{rel}", key=rel), []
        if who in batch.by_name:  # a participant: the relation is the speaker's fact, the subject is theirs
            return _Who(batch.by_name[who], who), [_Rule("关系", "", f"{name}的{rel}是{who}", who)]
        return batch.add_person(person_ref, name, rel, who), [_Rule("关系", "", f"{name}的{rel}是{who}", who)]
    # "我的下属叫陈思琪", "我有个表弟叫张伟"
    if m := _MY_NAMED_RE.match(clause):
        who, rel = m.group("who"), _REL_FULL.get(m.group("rel"), m.group("rel"))
        if _looks_like_name(who) and not _JOB_RE.match("是" + who):
            return batch.add_person(person_ref, name, rel, who), [_Rule("关系", "", f"{name}的{rel}叫{who}", who)]
    # "我将要参加的航空服务峰会" / "我下周要参加读书会"
    if (m := re.match(r"^(?P<time>(?:" + _TIME + r")*)我(?:们)?(?P<rest>.+)$", clause)) and (
        j := _JOIN_RE.match(m.group("rest"))
    ):
        event = j.group("event")
        if not _NOT_EVENT.match(event) and not _TRIVIAL.fullmatch(event):
            verb = f"{m.group('time')}{j.group('mod')}{j.group('verb')}"
            batch.add_event(event, f"{name}{verb}的")
            done = j.group("done") or ""
            return _Who(person_ref, event, event=event), [_Rule("事件", "", f"{name}{verb}{done}{event}", event)]
    # "其家乡是北京", "它的规模是九千人": the subject of the previous clause
    pronoun = re.match(r"^(?:其|他们|她们|他|她|它)(?P<pred>.+)$", clause)
    if subject is not None and subject is not _SPEAKER and pronoun:
        if subject.event:
            return _event_fact(subject.event, clause, person_ref, batch)
        found = _about(subject, pronoun.group("pred"), name)
        return (subject, found) if found is not None else (None, [])
    # "我表弟…", "我的上司…", "舅妈…"
    if m := _MY_RELATION_RE.match(clause) or _BARE_RELATION_RE.match(clause):
        rel, time, pred = _REL_FULL.get(m.group("rel"), m.group("rel")), m.group("time"), m.group("pred")
        who = _Who(person_ref, f"{name}的{rel}", key=rel, kin=bool(_KIN_RE.fullmatch(m.group("rel"))))
        found = _about(who, pred, name)
        if found is not None:
            return who, found
        said_by_me = clause[len(time):].startswith("我")
        if who.kin and said_by_me and len(pred) >= 2 and not re.match(r"^的?(?:说|觉得|认为|问|让|叫)", pred):
            # what a family member does or is, in the speaker's words ("我老婆下周来杭州看我")
            return who, [_Rule("关系", "", _third_person(name, "", f"的{rel}{time}{pred}"), rel)]
        return None
    # a participant or a person introduced earlier, named as the subject
    for known, who in [*((n, _Who(ref, n)) for n, ref in batch.by_name.items() if ref != person_ref),
                       *batch.people.items()]:
        if clause.startswith(known):
            found = _about(who, clause[len(known):], name)
            if found is not None:
                return who, found
    # "松下空气净化器是我很喜欢的家电", "X是我的心头好"
    if (m := _LIKED_RE.match(clause)) and not _PRONOUN_START.match(m.group("what")):
        return _SPEAKER, [_Rule("偏好", "", _attach("", clause, name), m.group("what"))]
    # an event named as the subject: "金融科技论坛的地点是北京"
    if (m := _EVENT_RE.match(clause)) and not _NOT_EVENT.match(m.group("event")):
        return _event_fact(m.group("event"), clause, person_ref, batch)
    # another named person: "王丽娟的联系电话是…"
    for size in (3, 2, 4):
        who = clause[:size]
        if _looks_like_name(who) and who != name:
            found = _about(_Who(person_ref, who, key=who), clause[size:], name)
            if found:
                return _Who(person_ref, who, key=who), found
    # a subject-less clause after a clause about someone else is about them too
    if subject is not None and subject is not _SPEAKER and not subject.event:
        found = _about(subject, clause, name)
        if found is not None:
            return subject, found
    # an opinion about a thing or a place, at the head of a message: "荔枝公园真是散步的好地方"
    if first and not clause.startswith("我") and (what := _opinion(clause)):
        said = _attach("", clause, name)
        return _SPEAKER, [_Rule("偏好", "", said if name in said else f"{name}觉得{said}", what)]
    return None


def _event_fact(event: str, clause: str, person_ref: str, batch: _Batch) -> tuple[_Who, list[_Rule]]:
    m = _EVENT_RE.match(clause) or _EVENT_CONT_RE.match(clause)
    subject = _Who(person_ref, event, event=event)
    if m is None:
        return subject, []
    value = _trim(m.group("v"))
    if not value or _PRONOUN_START.match(value):
        return subject, []
    head = f"{batch.events.get(event, '')}{event}"
    attr = m.group("attr")
    return subject, [_Rule("事件", "", f"{head}的{attr}{m.group('verb')}{value}"[:80], f"{event}的{attr}")]


def _opinion(text: str) -> str:
    """The thing an evaluative clause is about ("亚瑟士这双鞋真不错" → "亚瑟士这双鞋"), or ''."""
    text = re.sub(r"^(?:这款|这个|这家|这双|这部|这台|这座|这次|这)(?=[\u4e00-\u9fffA-Za-z]{2})", "", text)
    m = _OPINION_RE.match(text)
    if m is None:
        return ""
    what = re.sub(r"(?:这地方|那地方|这款|这个|那个)$", "", m.group("what")).strip()
    if len(what) < 2 or "是" in what or _NOT_OPINION_SUBJECT.match(what) or _PRONOUN_START.match(what):
        return ""
    return what


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
