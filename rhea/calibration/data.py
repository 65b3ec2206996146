"""Retrieval triples the project writes itself: (reply, a query that needs it, an unrelated query).

Each *topic family* has reply templates, query templates that can only be answered from
such a reply, and slot values. Families are split three ways, so the three uses never
share a topic or a template:

* ``train``       — the contrastive loss in joint training,
* ``calibrate``   — `rhea calibrate` fits τ_low/τ_high (and the latent centre) here,
* ``heldout``     — the tier benchmark; never trained or calibrated on.

An unrelated query is a query of *another family of the same split*, with its own slot draw.
Everything is deterministic from the seed.

>>> t = triples("heldout", 3, seed=0)
>>> len(t), sorted(vars(t[0]))
(3, ['family', 'query', 'reply', 'unrelated', 'unrelated_family'])
>>> t == triples("heldout", 3, seed=0)
True
"""
from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass

from rhea.errors import RheaError


class CalibrationDataError(RheaError, ValueError):
    """Unknown split, bad count, or a malformed triples file."""


@dataclass(frozen=True)
class Family:
    name: str
    replies: tuple[str, ...]
    queries: tuple[str, ...]
    slots: dict


@dataclass(frozen=True)
class Triple:
    """One retrieval example: `query` needs `reply`; `unrelated` does not."""

    family: str
    reply: str
    query: str
    unrelated: str
    unrelated_family: str


def _f(family_name, replies, queries, **slots) -> Family:
    return Family(family_name, tuple(replies), tuple(queries), slots)


NAMES = ["Mara", "Tomas", "Ines", "Kofi", "Lena", "Ravi", "Yuki", "Omar", "Sofia", "Anton", "Priya", "Jonas"]

FAMILIES: dict[str, list[Family]] = {
    "train": [
        _f("profile",
           ["{name} lives in {city} and works as a {job}.", "{name} is a {job} based in {city}, and has lived there for years.",
            "Your friend {name} moved to {city} last spring to work as a {job}."],
           ["Where does {name} live?", "What is {name}'s job?", "Remind me what {name} does in {city}."],
           name=NAMES, city=["Oslo", "Lima", "Cairo", "Lisbon", "Hanoi", "Dublin"], job=["baker", "nurse", "pilot", "teacher", "farmer"]),
        _f("recipe",
           ["For the {dish}, fry the {veg} in olive oil, add {spice} and simmer for {minutes} minutes.",
            "A simple {dish}: chop the {veg}, season with {spice}, and bake for {minutes} minutes."],
           ["How long does the {dish} cook?", "Which spice goes into the {dish}?", "What vegetable did you use for the {dish}?"],
           dish=["curry", "stew", "soup", "risotto", "gratin"], veg=["onions", "carrots", "spinach", "peppers", "leeks"],
           spice=["cumin", "paprika", "turmeric", "thyme"], minutes=["10", "20", "25", "40"]),
        _f("travel",
           ["In {place}, visit the {sight} in the morning and take the {transport} to the old town.",
            "A good day in {place}: start at the {sight}, then ride the {transport} along the coast."],
           ["What should I see first in {place}?", "How do I get around {place}?", "Which sight in {place} did you recommend?"],
           place=["Porto", "Kyoto", "Seville", "Krakow", "Bergen"], sight=["cathedral", "castle", "market", "museum", "harbour"],
           transport=["tram", "ferry", "bus", "funicular"]),
        _f("phone",
           ["To fix the {problem} on your {device}, open Settings, tap {menu} and turn off {feature}.",
            "Your {device} shows the {problem} because {feature} is on; disable it under {menu}."],
           ["How do I fix the {problem} on my {device}?", "Where is {feature} in the {device} settings?", "Why does my {device} have the {problem}?"],
           device=["phone", "tablet", "laptop", "smartwatch"], problem=["battery drain", "slow charging", "screen flicker", "lag"],
           menu=["Battery", "Display", "General", "Privacy"], feature=["background refresh", "adaptive brightness", "location services"]),
        _f("workout",
           ["Your {day} workout: {reps} {exercise}, a {minutes}-minute run, then stretch your {muscle}.",
            "On {day}, do {reps} {exercise} in three sets and finish by stretching the {muscle}."],
           ["What is my workout on {day}?", "How many {exercise} should I do?", "Which muscle do I stretch after the {exercise}?"],
           day=["Monday", "Wednesday", "Friday", "Sunday"], reps=["10", "15", "20", "30"], exercise=["squats", "push-ups", "lunges", "burpees"],
           minutes=["5", "10", "20"], muscle=["hamstrings", "calves", "shoulders", "hips"]),
        _f("garden",
           ["Plant the {plant} in {soil} soil, water it every {days} days and keep it in {light}.",
            "Your {plant} needs {light} and {soil} soil; water it once every {days} days."],
           ["How often should I water the {plant}?", "What soil does the {plant} like?", "Does the {plant} need sun or shade?"],
           plant=["tomatoes", "basil", "roses", "lavender", "fern"], soil=["sandy", "moist", "well-drained", "acidic"],
           days=["two", "three", "five", "seven"], light=["full sun", "partial shade", "bright indirect light"]),
        _f("car",
           ["Your {car} needs an {service} every {km} kilometres; the {part} should be checked at the same time.",
            "For the {car}, book the {service} at {km} km and ask the garage to inspect the {part}."],
           ["When does my {car} need its {service}?", "Which part of the {car} should be checked?", "How many kilometres until the {service}?"],
           car=["hatchback", "van", "pickup", "sedan"], service=["oil change", "inspection", "tyre rotation"],
           km=["5000", "10000", "15000"], part=["brake pads", "air filter", "battery", "timing belt"]),
        _f("book",
           ["{title} follows a {hero} who leaves {home} to find a lost {object}.",
            "In {title}, a young {hero} travels far from {home} searching for a stolen {object}."],
           ["What is {title} about?", "Who is the main character of {title}?", "What is the {hero} looking for in {title}?"],
           title=["The Salt Road", "Winter Lanterns", "The Glass Orchard", "North of Ash"], hero=["sailor", "miner", "healer", "thief"],
           home=["the island", "the mountains", "the capital", "the village"], object=["map", "crown", "compass", "sword"]),
    ],
    "calibrate": [
        _f("pet",
           ["Feed your {pet} {food} twice a day and take it to the vet every {months} months.",
            "A healthy {pet} eats {food}; book a vet check every {months} months."],
           ["What should I feed my {pet}?", "How often does the {pet} see the vet?", "Is {food} good for a {pet}?"],
           pet=["puppy", "kitten", "rabbit", "parrot"], food=["dry kibble", "fresh greens", "seeds", "wet food"], months=["three", "six", "twelve"]),
        _f("budget",
           ["Put {pct} percent of your salary into {account} and cap {category} spending at {amount} euros a month.",
            "Your budget: {amount} euros for {category}, and {pct} percent of income to the {account}."],
           ["How much can I spend on {category}?", "What share of my salary goes to the {account}?", "What was my limit for {category}?"],
           pct=["10", "15", "20"], account=["savings account", "pension fund", "emergency fund"],
           category=["groceries", "restaurants", "clothes", "hobbies"], amount=["150", "200", "300", "400"]),
        _f("movie",
           ["{film} is a {genre} film set in {setting}, directed by {director}.",
            "Watch {film}: a {genre} story in {setting} from director {director}."],
           ["Who directed {film}?", "What genre is {film}?", "Where is {film} set?"],
           film=["Blue Harbour", "The Long Night", "Paper Kings", "Silent Valley"], genre=["thriller", "comedy", "western", "drama"],
           setting=["Tokyo", "a desert town", "a space station", "1920s Paris"], director=["Ana Ruiz", "Jon Berg", "Mei Lin"]),
        _f("study",
           ["For the {subject} exam, review {topic} first and practise {count} past papers before {weekday}.",
            "Plan for {subject}: {count} practice papers, starting with {topic}, finished by {weekday}."],
           ["What should I review first for {subject}?", "How many past papers for the {subject} exam?", "When should I finish my {subject} practice?"],
           subject=["chemistry", "history", "algebra", "biology"], topic=["equations", "the cell", "the French revolution", "acids"],
           count=["three", "five", "eight"], weekday=["Tuesday", "Thursday", "Saturday"]),
        _f("medicine",
           ["Take {dose} of {drug} every {hours} hours with {with_}, and stop after {days} days.",
            "The doctor prescribed {drug}: {dose} every {hours} hours, always with {with_}, for {days} days."],
           ["How often do I take the {drug}?", "What dose of {drug} was prescribed?", "For how many days do I take {drug}?"],
           dose=["one tablet", "two capsules", "5 ml", "half a pill"], drug=["amoxicillin", "ibuprofen", "the antihistamine", "the eye drops"],
           hours=["four", "six", "eight", "twelve"], with_=["food", "a glass of water", "milk"], days=["five", "seven", "ten"]),
        _f("flight",
           ["Flight {code} to {dest} departs from gate {gate} at {time}; boarding closes {mins} minutes before.",
            "You fly to {dest} on {code}, leaving {time} from gate {gate}, and the gate shuts {mins} minutes early."],
           ["Which gate does my flight to {dest} leave from?", "What time is flight {code}?", "When does boarding close for {code}?"],
           code=["LX 318", "KL 1204", "TP 577", "SK 902"], dest=["Reykjavik", "Athens", "Montreal", "Nairobi"],
           gate=["B12", "C4", "D27", "A9"], time=["06:40", "11:15", "17:50", "22:05"], mins=["20", "30", "45"]),
        _f("apartment",
           ["The flat on {street} has {rooms} rooms, costs {rent} euros a month and the landlord {pets}.",
            "On {street} there is a {rooms}-room flat for {rent} euros; the landlord {pets}."],
           ["How much is the rent for the flat on {street}?", "How many rooms does the {street} flat have?", "Are pets allowed in the flat on {street}?"],
           street=["Linden Street", "Harbour Lane", "Mill Road", "Castle Square"], rooms=["two", "three", "four"],
           rent=["750", "980", "1200", "1450"], pets=["allows cats", "forbids pets", "allows small dogs"]),
        _f("meeting",
           ["Your meeting with {name} about the {project} is on {weekday} at {time} in room {room}.",
            "{name} booked room {room} for {weekday} at {time} to discuss the {project}."],
           ["When is my meeting with {name}?", "Which room is the {project} meeting in?", "What is the meeting with {name} about?"],
           name=NAMES, project=["quarterly report", "website redesign", "hiring plan", "product launch"],
           weekday=["Monday", "Wednesday", "Friday"], time=["9:30", "13:00", "15:45"], room=["204", "3B", "the attic", "Orion"]),
        _f("hiking",
           ["The {trail} trail is {km} kilometres long, climbs {metres} metres and starts at the {start}.",
            "Start the {trail} hike at the {start}: {km} km in total with {metres} metres of ascent."],
           ["How long is the {trail} trail?", "Where does the {trail} hike start?", "How much climbing is on the {trail} trail?"],
           trail=["Ridgeback", "Fern Gully", "Eagle Pass", "Three Lakes"], km=["6", "11", "18", "24"],
           metres=["250", "600", "1100"], start=["visitor centre", "old bridge", "car park", "chapel"]),
        _f("chess",
           ["In the {opening}, develop your {piece} to {square} on move {move} and castle {side}.",
            "Playing the {opening}: the {piece} goes to {square} by move {move}, then castle {side}."],
           ["Where does the {piece} go in the {opening}?", "Which side do I castle in the {opening}?", "On which move does the {piece} reach {square}?"],
           opening=["Sicilian Defence", "Italian Game", "London System", "French Defence"], piece=["knight", "bishop", "queen"],
           square=["f3", "c4", "d3", "e2"], move=["two", "three", "five"], side=["kingside", "queenside"]),
        _f("package",
           ["Your parcel from {shop} is at the {hub} depot and {carrier} will deliver it on {weekday} before {time}.",
            "{carrier} has your {shop} order in {hub}; expect it {weekday} before {time}."],
           ["When will my {shop} parcel arrive?", "Which company is delivering my {shop} order?", "Where is my parcel from {shop} now?"],
           shop=["Nordhaus", "Pixelworks", "Green Basket", "Atlas Books"], hub=["Rotterdam", "Leipzig", "Lyon", "Milan"],
           carrier=["DHL", "the postal service", "a local courier", "UPS"], weekday=["Tuesday", "Thursday", "Saturday"], time=["noon", "6 pm", "9 am"]),
        _f("painting",
           ["Mix {color1} with a little {color2} for the {subject}, and use a {brush} brush for the details.",
            "For the {subject}, blend {color1} and {color2}, then finish the edges with a {brush} brush."],
           ["Which colours do I mix for the {subject}?", "What brush should I use on the {subject}?", "How do I paint the {subject}?"],
           color1=["ultramarine", "ochre", "crimson", "sap green"], color2=["white", "burnt umber", "lemon yellow"],
           subject=["sky", "sunset", "forest", "portrait"], brush=["fine round", "flat", "fan", "rigger"]),
        _f("interview",
           ["For the {role} interview at {company}, prepare a story about {skill} and ask about the {topic}.",
            "{company} is interviewing you for {role}; they care about {skill}, so ask them about the {topic}."],
           ["What should I prepare for the {company} interview?", "Which job am I interviewing for at {company}?", "What should I ask {company} about?"],
           role=["data analyst", "project manager", "sales lead", "designer"], company=["Brightline", "Kestrel Labs", "Oakmont", "Vireo"],
           skill=["teamwork", "handling deadlines", "leading a project", "customer problems"], topic=["team size", "training budget", "remote work policy"]),
        _f("sleep",
           ["To sleep better, go to bed at {bedtime}, skip {habit} after {cutoff}, and keep the bedroom at {temp} degrees.",
            "Your sleep plan: lights out at {bedtime}, no {habit} after {cutoff}, bedroom at {temp} degrees."],
           ["What time should I go to bed?", "After what time should I avoid {habit}?", "How cool should my bedroom be?"],
           bedtime=["22:00", "22:30", "23:00"], habit=["coffee", "screens", "heavy meals", "exercise"], cutoff=["2 pm", "6 pm", "9 pm"],
           temp=["16", "18", "19"]),
    ],
    "heldout": [
        _f("code",
           ["The {error} in your {lang} script comes from line {line}: the {thing} is used before it is defined.",
            "Your {lang} program raises a {error} at line {line} because the {thing} was never set."],
           ["Why does my {lang} script raise a {error}?", "Which line causes the {error}?", "How do I fix the {error} in {lang}?"],
           lang=["Python", "Rust", "Java", "Go"], error=["NameError", "null pointer error", "type error", "index error"],
           line=["12", "40", "87", "103"], thing=["variable", "list", "config object", "counter"]),
        _f("history",
           ["The {event} happened in {year}, when {ruler} ruled {country}.",
            "In {year}, under {ruler}, {country} saw the {event}."],
           ["When did the {event} happen?", "Who ruled {country} during the {event}?", "In which country was the {event}?"],
           event=["great flood", "salt rebellion", "harbour fire", "grain crisis"], year=["1612", "1788", "1847", "1905"],
           ruler=["Queen Astrid", "King Otto", "Duke Leopold"], country=["Norland", "Vestria", "Caldonia"]),
        _f("music",
           ["To learn the {instrument}, practise {scale} scales for {minutes} minutes daily and start with {piece}.",
            "A {instrument} routine: {minutes} minutes of {scale} scales, then play {piece} slowly."],
           ["How long should I practise the {instrument}?", "Which piece should I start with on the {instrument}?", "What scales do I practise on the {instrument}?"],
           instrument=["violin", "piano", "guitar", "cello"], scale=["major", "minor", "chromatic"], minutes=["15", "30", "45"],
           piece=["a simple waltz", "Ode to Joy", "a folk song", "a short minuet"]),
        _f("weather",
           ["Tomorrow in {town} expect {sky} skies, {temp} degrees and {wind} wind, so bring a {item}.",
            "The forecast for {town}: {temp} degrees, {sky}, with {wind} wind; take a {item}."],
           ["What will the weather be in {town} tomorrow?", "Do I need a {item} in {town}?", "How warm will it be in {town}?"],
           town=["Bremen", "Galway", "Turin", "Leeds"], sky=["cloudy", "clear", "rainy", "stormy"], temp=["4", "12", "21", "29"],
           wind=["strong", "light", "gusty"], item=["umbrella", "scarf", "sun hat", "raincoat"]),
        _f("space",
           ["{planet} takes {days} days to orbit the sun and has {moons} moons; its surface is mostly {surface}.",
            "A year on {planet} lasts {days} days, it has {moons} moons and a surface of {surface}."],
           ["How long is a year on {planet}?", "How many moons does {planet} have?", "What is the surface of {planet} made of?"],
           planet=["Kepler-7b", "Tethra", "Orun", "Vashti"], days=["88", "225", "687", "4300"], moons=["no", "two", "five", "twelve"],
           surface=["ice", "rock", "iron dust", "frozen methane"]),
    ],
}
SPLITS = tuple(FAMILIES)
#: Triples per family `rhea calibrate` and the tier benchmark draw by default.
TRIPLES_PER_FAMILY = 24
#: Default calibration set size: every calibration family, TRIPLES_PER_FAMILY times.
DEFAULT_N_CALIBRATION = TRIPLES_PER_FAMILY * len(FAMILIES["calibrate"])


def _fill(template: str, family: Family, values: dict) -> str:
    return template.format(**values)


def _draw(rng: random.Random, family: Family) -> dict:
    return {k: rng.choice(v) for k, v in family.slots.items()}


def triples(split: str, n: int, *, seed: int = 0) -> list[Triple]:
    """`n` triples from the families of `split` (train / calibrate / heldout), deterministic from `seed`."""
    if split not in FAMILIES:
        raise CalibrationDataError(f"unknown split {split!r}; choose one of {list(SPLITS)}")
    if not isinstance(n, int) or n < 1:
        raise CalibrationDataError(f"n={n!r} must be an int >= 1")
    fams = FAMILIES[split]
    rng = random.Random(f"{split}:{seed}")
    out = []
    for i in range(n):
        fam = fams[i % len(fams)]
        other = rng.choice([f for f in fams if f.name != fam.name])
        values, other_values = _draw(rng, fam), _draw(rng, other)
        out.append(Triple(fam.name, _fill(rng.choice(fam.replies), fam, values), _fill(rng.choice(fam.queries), fam, values),
                          _fill(rng.choice(other.queries), other, other_values), other.name))
    return out


def write_triples_jsonl(path: str, split: str, n: int, *, seed: int = 0) -> int:
    """Write `n` triples of `split` as JSONL (one object per line); returns n."""
    with open(path, "w", encoding="utf-8") as f:
        for t in triples(split, n, seed=seed):
            f.write(json.dumps(asdict(t)) + "\n")
    return n


def read_triples_jsonl(path: str) -> list[Triple]:
    """Triples from a JSONL file with keys reply, query, unrelated (family fields optional)."""
    out = []
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except FileNotFoundError as e:
        raise CalibrationDataError(f"triples file {path} not found") from e
    except IsADirectoryError as e:
        raise CalibrationDataError(f"triples file {path} is a directory; pass a JSONL file") from e
    except UnicodeDecodeError as e:
        from rhea.storage import not_utf8

        raise CalibrationDataError(not_utf8(path, e)) from None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            out.append(Triple(rec.get("family", ""), rec["reply"], rec["query"], rec["unrelated"], rec.get("unrelated_family", "")))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            reason = "nested too deeply" if isinstance(e, RecursionError) else f"{type(e).__name__}: {e}"
            raise CalibrationDataError(f"{path} line {i + 1}: expected a JSON object with reply, query and unrelated "
                                       f"({reason})") from None
    if not out:
        raise CalibrationDataError(f"{path} holds no triples")
    return out
