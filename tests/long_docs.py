"""Long documents made for the retrieval tests and benchmark (benchmarks/retrieval.py): pages of
plausible, repetitive municipal prose about a few dozen made-up places, with facts ("needles")
planted at known pages or sections. The filler names the same places and the same kinds of
things as the needles, so a search has to match the question's particular words, not just its
topic; about a third of the questions say it in other words than the needle does.

Everything is seeded: the same call gives the same bytes.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

SYLLABLES = "har row mel ford kes trel ol wen bra dy mar lock fen wick ash by tam sel crow dun ris vale".split()
FACILITIES = ["ferry terminal", "water tower", "library", "fire station", "bus depot", "grain store", "town hall",
              "harbour office", "clock tower", "night market", "bridge", "pumping station", "school", "archive",
              "lighthouse", "tram shed", "post office", "cold store", "swimming pool", "bakery"]
VERBS = ["was inspected", "reported", "was repainted", "opened late", "closed early", "was audited",
         "asked for funding", "raised its fees", "changed its manager", "was cleaned", "hired two clerks"]
MONTHS = "January February March April May June July August September October November December".split()
FILLER_TAIL = ["after complaints from residents", "as the committee had asked", "within the agreed budget",
               "despite the weather", "for the third year running", "without any incident", "ahead of schedule",
               "according to the minutes", "under the new regulations", "as in previous years"]
# (needle, question, answer, paraphrased question): {p} is a place, {f} a facility
NEEDLES = [
    ("The spare key to the {f} in {p} is kept in locker {n}B at the {p} police office.",
     "Where is the spare key to the {f} in {p} kept?",
     "Which locker holds the extra key for the {p} {f}?", "locker {n}B"),
    ("The {f} in {p} is serviced by {c} Marine under contract number KM-{n}{n}.",
     "Who services the {f} in {p}, and under which contract number?",
     "Which company maintains the {p} {f}?", "KM-{n}{n}"),
    ("The emergency phone number of the {f} in {p} is 0{n}-555-{n}{n}.",
     "What is the emergency phone number of the {f} in {p}?",
     "Who do I call in an emergency at the {p} {f}?", "555-{n}{n}"),
    ("The {f} in {p} was founded in 18{n} by the engineer {c} Ashby.",
     "Who founded the {f} in {p}, and when?",
     "Which engineer built the {p} {f}, and in what year?", "18{n} by the engineer"),
    ("The {f} in {p} keeps its reserve fund of {n},{n}00 crowns at {c} Savings Bank.",
     "How large is the reserve fund of the {f} in {p}, and which bank keeps it?",
     "Where does the {p} {f} keep its savings?", "{n},{n}00 crowns"),
]
COMPANIES = ["Kestrel", "Marlow", "Brady", "Fenwick", "Tamsel", "Dunris", "Olwen", "Crowvale"]


@dataclass(frozen=True)
class Needle:
    where: int          # page (from 1) or section (from 1)
    text: str           # the sentence planted
    question: str
    answer: str         # a string found only in the needle


def places(rng: random.Random, n: int = 40) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        name = (rng.choice(SYLLABLES) + rng.choice(SYLLABLES)).capitalize() + rng.choice(["", " Quay", " Lane", " Cross"])
        if name not in out:
            out.append(name)
    return out


def filler(rng: random.Random, towns: list[str], sentences: int) -> str:
    lines = []
    for _ in range(sentences):
        lines.append(f"In {rng.choice(MONTHS)} the {rng.choice(FACILITIES)} in {rng.choice(towns)} {rng.choice(VERBS)} "
                     f"{rng.choice(FILLER_TAIL)}, and the {rng.choice(FACILITIES)} of {rng.choice(towns)} "
                     f"{rng.choice(VERBS)}.")
    return " ".join(lines)


def needles(rng: random.Random, towns: list[str], count: int, units: int, *, paraphrase_every: int = 3,
            used: set[str] | None = None) -> list[Needle]:
    """`count` needles at distinct units (pages or sections) 1..units, each with a unique answer."""
    used = used if used is not None else set()
    where = rng.sample(range(1, units + 1), count)
    out = []
    for i, unit in enumerate(where):
        while True:
            text, question, other, answer = NEEDLES[i % len(NEEDLES)]
            fill = {"p": rng.choice(towns), "f": rng.choice(FACILITIES), "n": str(rng.randrange(10, 99)),
                    "c": rng.choice(COMPANIES)}
            if answer.format(**fill) not in used:
                break
        used.add(answer.format(**fill))
        q = other if i % paraphrase_every == paraphrase_every - 1 else question
        out.append(Needle(unit, text.format(**fill), q.format(**fill), answer.format(**fill)))
    return out


def pages_with(needle_list: list[Needle], n_pages: int, seed: int, towns: list[str], sentences: int = 14) -> list[str]:
    """`n_pages` pages of filler (paragraphs of 3-4 sentences), each needle inside its page."""
    rng = random.Random(seed)
    by_unit = {nd.where: nd for nd in needle_list}
    pages = []
    for n in range(1, n_pages + 1):
        paras = [filler(rng, towns, rng.randint(3, 4)) for _ in range(max(1, sentences // 3))]
        if n in by_unit:
            paras.insert(rng.randrange(len(paras) + 1), by_unit[n].text)
        pages.append("\n".join(paras))
    return pages


def contract_pages(pages: int = 300, fact_page: int = 217, seed: int = 25) -> tuple[list[str], Needle]:
    """The test's 300-page document with one fact on `fact_page`: who services the emergency
    generator of the Harrow Lane depot."""
    rng = random.Random(seed)
    towns = places(rng)
    needle = Needle(fact_page,
                    "The emergency generator at the Harrow Lane depot is serviced by Kestrel Marine "
                    "under contract number KM-4471.",
                    "Who services the emergency generator at the Harrow Lane depot?", "KM-4471")
    return pages_with([needle], pages, seed, towns, sentences=12), needle
