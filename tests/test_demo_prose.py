"""The demo corpus keeps the English sentences of a docstring and drops its code."""

from jaxtrain.data.demo_prose import prose, prose_paragraph

DOCSTRING = """Return the number of items in the queue.

This method is not reliable: the size may change
as soon as it returns, since :class:`Queue` is shared
between threads; use :meth:`~Queue.empty` instead.

    >>> q = Queue()
    >>> q.qsize()
    0

Example::

    for item in iter(q.get, None):
        process(item)

put(item, block=True, timeout=None)

Special names ``__getattr__`` and ``__dir__`` customise *access* to the
attributes of a module, as **PEP 562** describes.

See also: os.path.join(a, *p) -> str
"""


def test_prose_keeps_sentences_on_one_line() -> None:
    assert prose(DOCSTRING).split("\n\n") == [
        "Return the number of items in the queue.",
        "This method is not reliable: the size may change as soon as it returns, since Queue "
        "is shared between threads; use Queue.empty instead.",
        'Special names "__getattr__" and "__dir__" customise access to the attributes of a '
        "module, as PEP 562 describes.",
    ]


def test_code_is_not_prose() -> None:
    for code in [
        "    >>> q.qsize()\n    0",
        "put(item, block=True, timeout=None)",
        "x = {'a': 1, 'b': [2, 3]}  # a mapping of names to lists",
        ".. versionchanged:: 3.8 the default is now the fastest protocol.",
        "See also: os.path.join(a, *p) -> str",
        "Queue EmptyError FullError Shutdown.",
    ]:
        assert prose_paragraph(code) is None, code
