"""docs/troubleshooting.md quotes messages the code really prints (reworded ones fail here)."""

import ast
import re

from conftest import REPO

PLACEHOLDER = "…"


def _message_templates() -> str:
    """Every string literal of jaxtrain/ and tools/, f-string fields written as the placeholder."""
    texts = []
    for path in [*(REPO / "jaxtrain").rglob("*.py"), *(REPO / "tools").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                texts.append(
                    "".join(
                        v.value if isinstance(v, ast.Constant) else PLACEHOLDER for v in node.values
                    )
                )
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append(node.value)
    return "\n".join(texts)


def test_quoted_messages_exist_in_the_code():
    doc = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    quoted = [" ".join(q.split()) for q in re.findall(r"\*\*`(.+?)`\*\*", doc, re.S)]
    assert len(quoted) > 60
    templates = _message_templates()
    missing = []
    for message in quoted:
        pieces = [p.strip() for p in message.split(PLACEHOLDER)]
        missing += [(message, p) for p in pieces if len(p) >= 5 and p not in templates]
    assert not missing, "\n".join(f"{m!r}: {p!r} not found" for m, p in missing)
