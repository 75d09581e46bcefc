"""Prompts of different kinds, for measuring the tokenizers (docs/context.md)."""

from __future__ import annotations

import json

SAMPLES: dict[str, str] = {
    "english": (
        "The context builder assembles system instructions, active skills, retrieved "
        "memory, the conversation and tool results under per-source and total token "
        "budgets. It orders them deterministically, removes duplicates and compacts what "
        "does not fit, so the same inputs give the same context on every worker."),
    "english_chat": ("I'd like to book a table for four at 7pm tomorrow, somewhere quiet "
                     "near the station if possible. Thanks!"),
    "code": (
        "def build(items: list[Item], budget: int) -> list[Item]:\n"
        "    kept = []\n    used = 0\n"
        "    for item in sorted(items, key=lambda i: (-i.priority, i.id)):\n"
        "        if used + item.tokens > budget:\n            break\n"
        "        kept.append(item); used += item.tokens\n    return kept\n"),
    "json": json.dumps({"user": {"id": "u-123", "name": "Ada Lovelace",
                                 "roles": ["admin", "editor"],
                                 "quota": {"tokens": 120000, "used": 4521}},
                        "items": [{"id": i, "score": round(0.9 - i / 10, 2), "tags": ["a", "b"]}
                                  for i in range(5)]}),
    "markdown": ("# Skills\n\n- **name**: `pdf-extract`\n- version 1.2.0\n\nUse "
                 "`extract(path)` when the user attaches a PDF; never run scripts.\n"),
    "log": ("2025-01-07T12:03:44Z worker-3 INFO task=hypha.nodes.run id=9f2c1e7a attempt=2 "
            "latency_ms=153.2 status=ok"),
    "russian": ("Построитель контекста собирает системные инструкции, активные навыки, "
                "найденную память, диалог и результаты инструментов в пределах бюджетов."),
    "chinese": ("上下文构建器在每个来源和总的令牌预算内组装系统指令、"
                "活动技能、检索到的记忆、对话和工具结果。"),
    "japanese": ("コンテキストビルダーは、システム指示、スキル、記憶、"
                 "会話、ツールの結果をトークン予算内でまとめます。"),
    "arabic": ("يقوم منشئ السياق بتجميع تعليمات النظام والمهارات النشطة والذاكرة المسترجعة "
               "والمحادثة ونتائج الأدوات."),
}
