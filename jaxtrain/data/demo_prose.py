"""The English prose in a docstring: what the demo corpus keeps of Python's documentation.

Docstrings and reference topics mix prose with code: doctest sessions, indented examples,
signatures, tables, reStructuredText roles. A model trained for a couple of minutes on CPU spends
its capacity on that code and then samples neither English nor Python (measured in
docs/quickstart.md: the same run reaches a clearly lower loss per byte on the prose alone and
samples readable sentences). So the demo keeps only paragraphs that read as sentences, each on
one line (hard line wraps removed), with reStructuredText roles reduced to their text.
"""

from __future__ import annotations

import re

# :func:`os.path.join` and :class:`~io.TextIOBase` -> the name inside the backquotes.
_ROLE = re.compile(r":[\w.:+-]+:`~?([^`]*)`")
# ``literal`` -> "literal", the quoting the rendered reference topics use.
_LITERAL = re.compile(r"``([^`]*)``")
# *emphasis* and **strong** -> the words.
_EMPHASIS = re.compile(r"\*{1,2}(\w[^*]*?)\*{1,2}")
# "quoted" code is judged as a word, not by its characters: prose about "__getattr__" is prose.
_QUOTED = re.compile(r"\"[^\"\s]{1,40}\"")
_WORD = re.compile(r"[A-Za-z]+(?:['’][a-z]+)?")
# Characters of code rather than prose.
_CODE_CHARS = frozenset("=_{}[]<>#*/\\|@$%^&~`+")
MIN_PARAGRAPH_CHARS = 40
MIN_WORDS = 6
MAX_CODE_SHARE = 0.03  # of a paragraph's characters
MAX_DIGIT_SHARE = 0.08  # more is a table of numbers or a list of versions
MIN_LETTER_SHARE = 0.7  # letters inside words, of a paragraph's characters
MIN_LOWERCASE_WORDS = 0.6  # identifiers and headings are mostly not lowercase words
# A sentence ends a paragraph: a stop, possibly inside a bracket or quotes ("(See below.)").
_SENTENCE_END = re.compile(r"[.:;!?][)\"'”]*$")


def prose_paragraph(paragraph: str) -> str | None:
    """`paragraph` on one line if it reads as English sentences, else None."""
    lines = paragraph.splitlines()
    if any(line.lstrip().startswith((">>>", "...", ".. ", "$ ")) for line in lines):
        return None  # a doctest session, a reStructuredText directive or a shell example
    text = " ".join(" ".join(lines).split())
    if len(text) < MIN_PARAGRAPH_CHARS or not _SENTENCE_END.search(text):
        return None
    judged = _QUOTED.sub("x", text)
    if sum(c in _CODE_CHARS for c in judged) > MAX_CODE_SHARE * len(judged) or sum(
        c.isdigit() for c in judged
    ) > MAX_DIGIT_SHARE * len(judged):
        return None
    words = _WORD.findall(judged)
    if (
        len(words) < MIN_WORDS
        or sum(map(len, words)) < MIN_LETTER_SHARE * len(judged)
        or sum(w.islower() for w in words) < MIN_LOWERCASE_WORDS * len(words)
    ):
        return None
    return text


def prose(text: str) -> str:
    """The prose paragraphs of a docstring or reference topic, separated by blank lines."""
    text = _EMPHASIS.sub(r"\1", _LITERAL.sub(r'"\1"', _ROLE.sub(r"\1", text)))
    kept, literal = [], False
    for paragraph in re.split(r"\n[ \t]*\n", text):
        # An indented block after "Example::" is reStructuredText's literal block: code.
        if literal and paragraph[:1].isspace():
            continue
        literal = paragraph.rstrip().endswith("::")
        if line := prose_paragraph(paragraph.rstrip().removesuffix(":") if literal else paragraph):
            kept.append(line)
    return "\n\n".join(kept)
