"""Numbers as clients send them: ASCII digits only."""


def only_digits(text: str) -> bool:
    """Whether `text` is one or more ASCII digits. `str.isdigit()` alone is true of "¹" and
    "²" too, which `int()` refuses: a cursor or a `Last-Event-ID` of them was a 500 once."""
    return text.isascii() and text.isdigit()
