"""Recall dialogues the project writes itself: a later question needs a fact stated only in an
earlier reply. Deterministic from a seed; used to train the default adapters and, with a
disjoint seed and held-apart names, to benchmark compressor fidelity.

>>> d = recall_dialogue(random.Random(0), n_filler=1)
>>> len(d.turns), d.answer in d.turns[0][1]
(3, True)
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass

NAMES = ["Mara", "Tomas", "Ines", "Kofi", "Lena", "Ravi", "Yuki", "Omar", "Sofia", "Anton", "Priya", "Jonas",
         "Elif", "Mateo", "Nadia", "Hugo", "Amara", "Felix", "Zara", "Leon", "Carmen", "Dmitri", "Hana", "Pablo"]
#: names only the benchmark uses, so held-apart dialogues never repeat a training person
HELD_OUT_NAMES = ["Greta", "Idris", "Maya", "Noah", "Olga", "Tariq", "Vera", "Wen"]
CITIES = ["Oslo", "Lima", "Cairo", "Lisbon", "Hanoi", "Dublin", "Nairobi", "Quito", "Vienna", "Osaka", "Perth", "Bogota"]
JOBS = ["baker", "nurse", "pilot", "teacher", "farmer", "chemist", "plumber", "lawyer", "painter", "dentist"]
PETS = ["dog", "cat", "parrot", "rabbit", "turtle", "hamster"]
PET_NAMES = ["Pip", "Rex", "Mango", "Biscuit", "Luna", "Ziggy", "Olive", "Tango", "Nugget", "Pepper"]
COLORS = ["red", "blue", "green", "yellow", "purple", "orange", "black", "white"]

QUESTIONS = {
    "city": ("Where does {name} live?", "{name} lives in {city}."),
    "job": ("What does {name} do for work?", "{name} works as a {job}."),
    "pet": ("What is the name of {name}'s {pet}?", "{name}'s {pet} is called {pet_name}."),
    "color": ("What is {name}'s favourite colour?", "{name}'s favourite colour is {color}."),
}
INTROS = ["Tell me about my friend {name}.", "What do you remember about {name}?", "Describe {name} for me.",
          "Who is {name}?"]
PROFILE = ["{name} lives in {city} and works as a {job}. {name} has a {pet} called {pet_name} and loves the colour {color}.",
           "{name} is a {job} living in {city}. {name}'s {pet} is called {pet_name}, and {name}'s favourite colour is {color}.",
           "Living in {city}, {name} works as a {job}, keeps a {pet} named {pet_name} and likes {color} best."]
FILLER = [("Give me a tip for sleeping better.", "Keep a regular bedtime and avoid screens for an hour before sleep."),
          ("How do I boil an egg?", "Put the egg in boiling water for about nine minutes, then cool it in cold water."),
          ("Name a good habit for studying.", "Study in short sessions with breaks, and test yourself on what you read."),
          ("What is a quick way to stay hydrated?", "Keep a bottle of water nearby and drink a glass with every meal."),
          ("Suggest a short stretch for my back.", "Stand up, reach both arms overhead and gently lean to each side."),
          ("How can I save money on food?", "Plan meals for the week and buy only what the plan needs."),
          ("What should I pack for a day hike?", "Water, a snack, a light jacket, sunscreen and a charged phone."),
          ("How do I keep a plant alive?", "Give it light, water it when the soil is dry, and do not overwater.")]
ANSWER_KEYS = {"city": "city", "job": "job", "pet": "pet_name", "color": "color"}


@dataclass
class RecallDialogue:
    """Turns [(user, reply)]; the last reply answers from turn 0's reply; `answer` is the fact."""

    turns: list[tuple[str, str]]
    answer: str
    asked: str

    def to_record(self) -> dict:
        """OpenAI ``messages`` format, one JSONL line."""
        msgs = []
        for user, reply in self.turns:
            msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
        return {"messages": msgs, "answer": self.answer, "asked": self.asked}


def recall_dialogue(rng: random.Random, *, n_filler: int = 1, names: list[str] = NAMES) -> RecallDialogue:
    """One dialogue: a profile reply, `n_filler` unrelated turns, then a question about the profile."""
    facts = {"name": rng.choice(names), "city": rng.choice(CITIES), "job": rng.choice(JOBS), "pet": rng.choice(PETS),
             "pet_name": rng.choice(PET_NAMES), "color": rng.choice(COLORS)}
    turns = [(rng.choice(INTROS).format(**facts), rng.choice(PROFILE).format(**facts))]
    turns += rng.sample(FILLER, n_filler)
    asked = rng.choice(sorted(QUESTIONS))
    question, answer = QUESTIONS[asked]
    turns.append((question.format(**facts), answer.format(**facts)))
    return RecallDialogue(turns, facts[ANSWER_KEYS[asked]], asked)


def write_recall_jsonl(path: str, n: int, seed: int, *, names: list[str] = NAMES, max_filler: int = 2) -> int:
    """Write `n` dialogues (0..max_filler filler turns each) to `path`; returns n."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            f.write(json.dumps(recall_dialogue(rng, n_filler=rng.randint(0, max_filler), names=names).to_record()) + "\n")
    return n
