"""Operator-facing names of tuning codes (the engine keeps its code names and Chinese labels
without Django; these are the translatable ones the console shows)."""
from __future__ import annotations

import re

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

PARAM_LABELS = {
    "bm25_weight": gettext_lazy("词面相关度权重"),
    "retention_weight_floor": gettext_lazy("留存度权重下限"),
    "ppr_alpha": gettext_lazy("联想扩散回迁概率"),
    "ppr_hops": gettext_lazy("联想扩散跳数"),
    "pool_score_percentile": gettext_lazy("候选池分数百分位"),
    "fact_recall_limit": gettext_lazy("进提示词的事实条数上限"),
    "recalled_episode_limit": gettext_lazy("情节召回条数"),
    "recent_episode_limit": gettext_lazy("近期情节条数"),
    "reference_blend": gettext_lazy("参考排序（乘法）"),
    "retention_prior": gettext_lazy("留存度先验权重"),
    "dense_margin": gettext_lazy("相关门：余弦可低于闲聊背景多少"),
    "query_margin": gettext_lazy("相关门：最佳候选高出闲聊背景多少算在问记忆"),
    "dense_spread": gettext_lazy("相关门：离最佳候选的余弦多近也放行"),
    "lexical_share": gettext_lazy("相关门：词面覆盖占最佳候选的比例"),
    "lead_gap": gettext_lazy("相关门：向量领先第二名多少算明显领先"),
    "lead_ratio": gettext_lazy("相关门：BM25 是第二名几倍算明显领先"),
    "pool_share": gettext_lazy("相关度的池内占比权重"),
    "time_boost": gettext_lazy("问题点明日期时，该时段内事实的加分"),
    "told_gain": gettext_lazy("事实出处的对话与这一句相符时的加分（0 = 不看出处）"),
    "told_window": gettext_lazy("事实出处：前后各看几条消息"),
    "context_lexical_lines": gettext_lazy("对话上下文：词面查询的用户行数"),
    "context_dense_messages": gettext_lazy("对话上下文：向量查询的消息条数"),
    "context_half_life": gettext_lazy("对话上下文：权重半衰（条）"),
    "context_window_weight": gettext_lazy("对话上下文：近期用户发言与这一句的平均向量的权重"),
    "context_gap_minutes": gettext_lazy("对话上下文：沉默多久算新对话（分钟）"),
    "context_text_lines": gettext_lazy("对话上下文：多行的发言按对话读（1 = 是）"),
    "context_whole_weight": gettext_lazy("对话上下文：整段对话的向量的权重"),
    "context_whole_lexical": gettext_lazy("对话上下文：多行发言整段作词面查询的权重"),
    "context_shown_out": gettext_lazy("对话上下文：对话里已有的原话不作记忆召回（1 = 是）"),
}
#: What turning each parameter changes (the "meaning" column of the parameter table).
PARAM_HELP = {
    "bm25_weight": gettext_lazy("词面命中（BM25）在相关度里占多大分量"),
    "retention_weight_floor": gettext_lazy("快被遗忘的事实在得分里至少还占多少分量"),
    "ppr_alpha": gettext_lazy("联想扩散每一步回到起点的概率；越大越贴近起点"),
    "ppr_hops": gettext_lazy("联想最多走几步"),
    "pool_score_percentile": gettext_lazy("只保留得分在这个百分位以上的候选（0 = 全部保留）"),
    "fact_recall_limit": gettext_lazy("每轮最多放进提示词的事实条数"),
    "recalled_episode_limit": gettext_lazy("每轮按话题想起的情节条数"),
    "recent_episode_limit": gettext_lazy("每轮按时间带上的最近情节条数"),
    "reference_blend": gettext_lazy("1 = 参考排序：相关度 × 留存权重，没有相关度下限（用来和默认排序对比）"),
    "retention_prior": gettext_lazy("相关度相近时，留存度（新鲜、牢固）能把一条事实往前推多少（占候选池最佳相关度的比例）"),
    "dense_margin": gettext_lazy(
        "这句话和一组寒暄句（你好、哈哈、在吗…）最像的程度是它的「闲聊背景」；事实的余弦不低于背景加这个值（通常为负）才算相关"
    ),
    "query_margin": gettext_lazy("最佳候选的余弦比闲聊背景至少高这么多时，认为这句话在问记忆"),
    "dense_spread": gettext_lazy("在问记忆时，余弦离最佳候选不超过这个差距的事实也放行"),
    "lexical_share": gettext_lazy("事实覆盖查询信息词（寒暄词不算）的比例，至少要达到最佳候选的这个比例才算相关"),
    "lead_gap": gettext_lazy("向量最相近的事实领先第二名这么多时，无论如何都放行"),
    "lead_ratio": gettext_lazy("BM25 最强的事实是第二名的这么多倍（且命中信息词）时，无论如何都放行"),
    "pool_share": gettext_lazy(
        "词面（BM25）和向量余弦各有多少按「占候选池最强者的比例」计（0 = 只用绝对值：BM25 饱和，强弱命中差不多）"
    ),
    "time_boost": gettext_lazy("问题写明了年月日（如 2023年10月、2023-10-13）时，那段时间里记下的事实加多少分（0 = 不看日期）"),
    "told_gain": gettext_lazy(
        "事实记下了是在哪条消息里听到的时：那条消息前后的对话含有这一句的信息词越多，加分越多，最多加这么多（0 = 不看出处）"
    ),
    "told_window": gettext_lazy("「事实出处」看那条消息前后各几条（对话中途沉默太久则到此为止）"),
    "context_lexical_lines": gettext_lazy("最近几条用户发言也用来检索（0 = 只看这一句）"),
    "context_dense_messages": gettext_lazy("最近几条消息的向量也参与比较（0 = 只看这一句）"),
    "context_half_life": gettext_lazy("越早的发言权重越低：每隔这么多条减半"),
    "context_window_weight": gettext_lazy("把最近几句用户发言和这一句的向量取平均，当作一个向量；0 = 不用"),
    "context_gap_minutes": gettext_lazy("两条消息之间（或最后一条消息到这一轮）沉默超过这么久，更早的对话不再参与检索"),
    "context_text_lines": gettext_lazy("一轮的文字有好几行（或一段里三句以上）时，最后一行当这一句，前面几行当刚说过的对话（0 = 整段当一句）"),
    "context_whole_weight": gettext_lazy("多行的发言，或对话里用户最近的几句连同这一句，整段读成一个向量也参与比较，权重为此（0 = 不用）"),
    "context_whole_lexical": gettext_lazy("多行的发言按对话读时，整段文字也作一条词面查询，权重为此（0 = 不用）"),
    "context_shown_out": gettext_lazy("一条记忆的原文就是这轮对话里已有的一句（上下文消息，或多行发言里前面的一行）时，不再召回它：机器人已经看得到这句（0 = 照常排序）"),
}
PARAM_KINDS = {"float": gettext_lazy("小数"), "int": gettext_lazy("整数")}
GROUP_LABELS = {"all": gettext_lazy("全部"), "group": gettext_lazy("群聊"), "direct": gettext_lazy("私聊"),
                "desktop": gettext_lazy("桌面")}
#: What became of a turn's candidate (``memory.engine.scoring.Verdict``; the playground, the turn inspector, its
#: replay), and of the facts visibility held back before ranking or that have left memory since the turn.
VERDICT_LABELS = {
    "prompt": gettext_lazy("进入提示词"), "forgetting": gettext_lazy("被遗忘压下"),
    "limit": gettext_lazy("名额已满"), "gate": gettext_lazy("相关门拦下"), "visibility": gettext_lazy("可见性拦下"),
    "gone": gettext_lazy("已不在记忆里"),
}

_ACTIVE = re.compile(r"^当前生效（(.*)）$")
_SIDE = re.compile(r"^[AB] · ")  # comparisons stored their side in the label once; the page says it now


def profile_name(name: str | None) -> str:
    """A profile name; the built-in ``default`` profile in the interface language."""
    return _("默认") if not name or name == "default" else str(name)


def target_label(label: str | None) -> str:
    """The label of an evaluated target; the ones the console wrote itself are translated
    (``草稿``, ``当前生效（name）``), a name an operator typed is shown as typed."""
    label = _SIDE.sub("", label or "")
    if label in ("", "草稿"):
        return _("草稿")
    match = _ACTIVE.match(label)
    if match:
        return _("当前生效（%(name)s）") % {"name": profile_name(match.group(1))}
    return label
