"""Short, varied raw prompts of the kind users type (sentence openings,
questions, instructions), made from templates with a fixed seed: no external
data. train_draft.py distils on the target's continuations of the train part;
eval_draft.sh measures acceptance on the held-out part, which is never trained
on. The README's command prompt is held out as well (always, by name).

SPLIT RULE: the prompts are made in a fixed order from seed 0; prompt i is held
out when i % 8 == 7, and every prompt equal to a held-out one (or to the README
prompt) is dropped from the train part.

  python3 short_prompts.py [--held-out]             # one prompt a line
  python3 short_prompts.py --write DIR [--system S]  # held-out prompts as files, raw and in the chat template
"""
import argparse
import random

README_PROMPT = "The three most important inventions in history are"
HELD_OUT_EVERY = 8
RULE = ("templates filled from word lists with random.Random(0), in a fixed order; prompt i is held out when "
        f"i % {HELD_OUT_EVERY} == {HELD_OUT_EVERY - 1}; the README prompt is always held out")

TOPICS = ["the printing press", "photosynthesis", "the Roman Empire", "black holes", "machine learning",
          "the French Revolution", "climate change", "the human heart", "volcanoes", "the internet",
          "ancient Egypt", "electricity", "the immune system", "jazz music", "the moon landing", "democracy",
          "plate tectonics", "the stock market", "vaccines", "the Renaissance", "quantum physics", "honey bees",
          "the Silk Road", "renewable energy", "the water cycle", "chess", "the Industrial Revolution",
          "coral reefs", "cryptography", "the Great Wall of China", "gravity", "bread baking", "the piano",
          "Shakespeare", "the theory of evolution", "rainforests", "the steam engine", "money", "sleep",
          "the Olympic Games"]
TASKS = ["learn a new language", "cook rice", "write a good essay", "save money", "fall asleep faster",
         "start running", "plant a tree", "make friends in a new city", "prepare for an exam", "fix a flat tire",
         "train a puppy", "keep a houseplant alive", "give a presentation", "write a cover letter",
         "learn to code", "stay focused while studying", "brew coffee", "reduce stress", "organise a desk",
         "bake a cake", "start a garden", "read more books", "negotiate a salary", "clean a laptop screen",
         "change a light bulb", "plan a trip", "make pancakes", "memorise a poem", "paint a room",
         "back up a computer"]
THINGS = ["book", "season", "city", "animal", "food", "song", "invention", "colour", "sport", "holiday",
          "painting", "planet", "tree", "game", "film", "word", "tool", "flower", "river", "mountain"]
PEOPLE = ["a young girl", "an old fisherman", "a lonely robot", "a brave knight", "a curious cat", "a scientist",
          "two brothers", "a travelling merchant", "a small dragon", "the king", "a detective", "a farmer"]
PLACES = ["a small village", "the desert", "a busy market", "the ocean", "a distant planet", "the forest",
          "an old library", "a mountain town", "the city", "a castle"]
YEARS = ["1492", "1776", "1865", "1903", "1914", "1945", "1969", "1989", "2001", "2020"]
LANGS = ["French", "Spanish", "German", "Italian", "Japanese", "Portuguese"]
PHENOMENA = ["the sky look blue", "ice float on water", "the moon change shape", "bread rise", "leaves change colour",
             "thunder follow lightning", "the sea taste salty", "metal feel cold", "cats purr", "we dream"]
ADJ = ["important", "interesting", "surprising", "useful", "beautiful", "dangerous", "famous", "unusual"]

OPENINGS = [
    "The history of {topic} begins",
    "Once upon a time, {person} lived in {place}.",
    "In {year},",
    "My favourite {thing} is",
    "The best way to {task} is",
    "Scientists have recently discovered that",
    "{Topic} is important because",
    "The most {adj} thing about {topic} is",
    "Here is a short story about {person}:",
    "It was a cold morning in {place} when",
    "There are many reasons why people love {topic}.",
    "Most people do not know that {topic}",
    "The first step to {task} is",
    "Three {adj} facts about {topic}:",
    "Yesterday I visited {place} and",
    "A good {thing} should always",
    "When I was a child, I",
    "The main difference between {topic} and {topic2} is",
]
QUESTIONS = [
    "What is {topic}?",
    "How do I {task}?",
    "Why does {phenomenon}?",
    "Can you explain {topic}?",
    "What are the benefits of {topic}?",
    "Who was the most {adj} person in the history of {topic}?",
    "What is the best way to {task}?",
    "How does {topic} work?",
    "What happened in {year}?",
    "Is it hard to {task}?",
    "What should I know about {topic}?",
    "Which {thing} do you like the most, and why?",
]
INSTRUCTIONS = [
    "Write a short poem about {topic}.",
    "Give me three tips to {task}.",
    "Summarize the history of {topic}.",
    "List five facts about {topic}.",
    "Explain {topic} to a child.",
    "Translate 'good morning, my friend' into {lang}.",
    "Write a story about {person} in {place}.",
    "Describe your favourite {thing}.",
    "Write an email to a friend about {topic}.",
    "Compare {topic} and {topic2} in a few sentences.",
    "Give step-by-step instructions to {task}.",
    "Write a haiku about {thing}s.",
]


def _fill(rng, template):
    t1, t2 = rng.sample(TOPICS, 2)
    return template.format(topic=t1, topic2=t2, Topic=t1[0].upper() + t1[1:], task=rng.choice(TASKS),
                           thing=rng.choice(THINGS), person=rng.choice(PEOPLE), place=rng.choice(PLACES),
                           year=rng.choice(YEARS), lang=rng.choice(LANGS), phenomenon=rng.choice(PHENOMENA),
                           adj=rng.choice(ADJ))


def all_prompts(n=640, seed=0):
    """[(kind, text)] in a fixed order; kind is opening | question | instruction."""
    rng = random.Random(seed)
    kinds = [("opening", OPENINGS), ("question", QUESTIONS), ("instruction", INSTRUCTIONS)]
    out = []
    for i in range(n):
        kind, ts = kinds[i % 3]
        out.append((kind, _fill(rng, rng.choice(ts))))
    return out


def split(n=640, seed=0):
    """(train, held_out): lists of (kind, text); the README prompt is in held_out only."""
    ps = all_prompts(n, seed)
    held = [p for i, p in enumerate(ps) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    held_texts = {t for _, t in held} | {README_PROMPT}
    train = [p for i, p in enumerate(ps) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1 and p[1] not in held_texts]
    return train, held + [("opening", README_PROMPT)]


def system_line(gguf_path):
    """The default system line of the target's chat template (SmolLM2's inserts one when none is given)."""
    import os
    import re
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import llama_torch  # the gguf package, or its wheel in .deps/
    f = llama_torch.import_gguf().GGUFReader(gguf_path).fields.get("tokenizer.chat_template")
    m = re.search(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", f.contents() if f else "", re.S)
    return m.group(1) if m else None


def chat(text, system=None):
    """SmolLM2's chat template (ChatML) for one user turn, ready for the assistant's reply."""
    s = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    return f"{s}<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def write_held_out(out_dir, system=None):
    """The held-out prompts as files for the harness (eval_draft.sh): NNN.raw.txt
    (the text as typed) and NNN.chat.txt (one chat turn); README.raw.txt and
    README.chat.txt for the README command's prompt. Returns the file names."""
    import os
    os.makedirs(out_dir, exist_ok=True)
    names = []
    for i, (_, t) in enumerate(split()[1]):
        stem = "README" if t == README_PROMPT else f"{i:03d}"
        for kind, text in (("raw", t), ("chat", chat(t, system))):
            name = f"{stem}.{kind}.txt"
            with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
                f.write(text)
            names.append(name)
    return names


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--held-out", action="store_true", help="the held-out prompts (default: the train prompts)")
    ap.add_argument("--write", metavar="DIR", help="write each held-out prompt (raw and chat) to DIR, one file each")
    ap.add_argument("--system-from", metavar="GGUF", help="take the chat template's default system line from GGUF")
    a = ap.parse_args()
    if a.write:
        write_held_out(a.write, system_line(a.system_from) if a.system_from else None)
    else:
        train, held = split()
        for _, t in held if a.held_out else train:
            print(t)
