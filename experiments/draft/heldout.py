"""The train / held-out split of the default prompt books, in one place
(train_draft.py trains on the train part; eval_draft.sh prompts with the
held-out part). No torch needed.

SPLIT RULE: for each book, c = the index of the first "\\n" at or after
floor(0.85 * len(text)) (characters of the UTF-8 decoded file); text[:c] is
train, text[c + 1:] is held out.

  python3 heldout.py BOOK.txt OUT.txt     # writes the held-out part of BOOK
"""
import math
import sys

HELD_OUT_FRACTION = 0.15
RULE = ("per book: c = first newline at or after floor(0.85 * chars); train = text[:c], held out = text[c+1:]")


def split_point(text):
    c = text.find("\n", int(math.floor((1 - HELD_OUT_FRACTION) * len(text))))
    return len(text) if c < 0 else c


def split(text):
    c = split_point(text)
    return text[:c], text[c + 1:]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: heldout.py BOOK.txt OUT.txt")
    with open(sys.argv[1], encoding="utf-8") as f:
        held = split(f.read())[1]
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(held)
