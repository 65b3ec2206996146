"""Built-in material so every suite runs with no external data.

All text here was written for rhea (no benchmark content is copied). Lists are kept
diverse on purpose: instruction retention is measured over ordinary questions from many
domains, so a model cannot satisfy an instruction by topic accident.
"""
from __future__ import annotations

#: Ordinary, self-contained questions (instruction-retention queries, filler turns).
ORDINARY_QUESTIONS = (
    "Why is the sky blue?",
    "How do vaccines train the immune system?",
    "What is the difference between weather and climate?",
    "How does a refrigerator keep food cold?",
    "Why do cats purr?",
    "What causes the seasons on Earth?",
    "How do I make a simple tomato sauce?",
    "What are the benefits of learning a second language?",
    "How does compound interest work?",
    "Why do leaves change color in autumn?",
    "What is a black hole?",
    "How can I improve my sleep?",
    "What was the significance of the printing press?",
    "How do bees make honey?",
    "What is the difference between a virus and a bacterium?",
    "How do airplanes stay in the air?",
    "What should I consider when adopting a dog?",
    "Why is exercise good for mental health?",
    "How do solar panels generate electricity?",
    "What is the purpose of a central bank?",
    "How do I start learning to play the guitar?",
    "What makes a good cup of coffee?",
    "Why do we have time zones?",
    "How does recycling plastic actually work?",
    "What is photosynthesis?",
    "How can a small team run better meetings?",
    "What are the main causes of inflation?",
    "Why do some people enjoy spicy food?",
    "How did the ancient Romans build roads?",
    "What is machine learning, in plain words?",
    "How do tides work?",
    "What are good habits for saving money?",
    "Why do onions make people cry?",
    "How does a bill become a law in a parliament?",
    "What is the role of fungi in a forest?",
    "How can I keep houseplants alive?",
    "What is the water cycle?",
    "Why is biodiversity important?",
    "How do noise-cancelling headphones work?",
    "What are the pros and cons of working from home?",
    "How does a compass find north?",
    "Is chess a sport or a game?",
    "What makes a story memorable?",
    "How do earthquakes happen?",
    "Why do we dream?",
    "What is the best way to learn vocabulary?",
    "How do electric cars differ from petrol cars?",
    "What is a healthy breakfast?",
    "Why did the Titanic sink?",
    "How do you brew green tea properly?",
    "What is the difference between a lake and a pond?",
    "How do rainbows form?",
    "What should I pack for a weekend hiking trip?",
    "Why is the ocean salty?",
    "How does GPS know where I am?",
    "What are the rules of basketball in brief?",
    "How can I be more productive in the morning?",
    "What is the history of the bicycle?",
    "Why do birds migrate?",
    "How does a library decide which books to buy?",
    "What is the role of a referee in football?",
    "How do volcanoes form?",
    "What is the appeal of jazz music?",
    "How do I write a good cover letter?",
    "Why do we celebrate birthdays?",
    "What is an ecosystem?",
)

#: Topics and templates for the efficiency suite's verbose-reply-inducing queries.
VERBOSE_TOPICS = (
    "the French Revolution", "how the internet routes packets", "the life cycle of stars",
    "the history of jazz", "how vaccines are developed", "the causes of the First World War",
    "how a compiler works", "the economics of renewable energy", "the Roman Empire",
    "how the human heart works", "the invention of writing", "plate tectonics",
    "the Industrial Revolution", "how databases index data", "the Renaissance",
    "climate change and oceans", "the Silk Road", "how neural networks learn",
    "the history of medicine", "urban planning", "the Apollo program",
    "how money is created", "the evolution of whales", "the Ottoman Empire",
)
VERBOSE_TEMPLATES = (
    "Explain {topic} in detail, with examples and a short summary at the end.",
    "Write a thorough overview of {topic}, covering its history, key ideas and open questions.",
    "Give me a step-by-step, in-depth explanation of {topic} for a curious beginner.",
)

#: Key/value vocabulary for PI-LLM-style update streams (category -> candidate values).
KV_VOCABULARY = {
    "fruit": ["apple", "mango", "cherry", "plum", "kiwi", "banana", "pear", "fig", "lime",
              "papaya", "guava", "apricot"],
    "city": ["Lisbon", "Nairobi", "Osaka", "Quito", "Oslo", "Hanoi", "Dublin", "Perth",
             "Cairo", "Lima", "Tunis", "Seoul"],
    "color": ["crimson", "teal", "amber", "indigo", "olive", "magenta", "ivory", "coral",
              "navy", "maroon", "cyan", "beige"],
    "instrument": ["violin", "cello", "flute", "oboe", "banjo", "harp", "sitar", "tuba",
                   "piano", "drums", "clarinet", "ukulele"],
    "animal": ["otter", "lynx", "heron", "bison", "gecko", "walrus", "falcon", "badger",
               "moose", "koala", "ibex", "tapir"],
    "tool": ["hammer", "chisel", "wrench", "trowel", "pliers", "sander", "level", "rasp",
             "awl", "clamp", "saw", "drill"],
    "sport": ["rugby", "fencing", "rowing", "squash", "curling", "judo", "archery", "polo",
              "cricket", "netball", "karate", "surfing"],
    "metal": ["copper", "zinc", "nickel", "cobalt", "tin", "silver", "iron", "gold",
              "titanium", "lead", "platinum", "chromium"],
}

#: bAbI qa1-style world: who moves where.
BABI_ACTORS = ("Mary", "John", "Sandra", "Daniel", "Fred", "Julie")
BABI_LOCATIONS = ("hallway", "bathroom", "kitchen", "garden", "bedroom", "office")
BABI_VERBS = ("went to", "journeyed to", "moved to", "travelled to", "went back to")

#: Personal facts the long-horizon suite plants early and asks about later:
#: (attribute, statement template, recall question, values).
PLANTED_FACTS = (
    ("pet's name", "By the way, my dog's name is {value}.",
     "What is my dog's name?", ("Biscuit", "Pepper", "Juniper", "Mochi", "Rufus")),
    ("home town", "For context, I grew up in {value}.",
     "Where did I say I grew up?", ("Tromsø", "Valparaíso", "Ljubljana", "Cusco", "Gdańsk")),
    ("favourite number", "My favourite number is {value}, in case it matters later.",
     "What did I say my favourite number is?", ("17", "42", "73", "108", "256")),
    ("project code name", "Our project's code name is {value}; please remember it.",
     "What is our project's code name?", ("Bluefin", "Larkspur", "Orchid", "Quasar", "Tundra")),
    ("sister's job", "My sister works as a {value}.",
     "What does my sister do for a living?", ("pharmacist", "glassblower", "surveyor",
                                              "cartographer", "beekeeper")),
)

#: Two-turn questions in MT-Bench format for the long-horizon suite when no file is given.
#: The second turn builds on the first; ones with a checkable answer carry a reference.
CHAINED_QUESTIONS = (
    {"question_id": "rhea-1", "category": "math",
     "turns": ["A train travels 180 km in 2 hours. What is its average speed in km/h?",
               "At that speed, how many minutes does it need for 45 km?"],
     "reference": ["90", "30"]},
    {"question_id": "rhea-2", "category": "math",
     "turns": ["What is 15% of 240?", "Add 14 to that result and divide by 5."],
     "reference": ["36", "10"]},
    {"question_id": "rhea-3", "category": "reasoning",
     "turns": ["Anna is taller than Ben, and Ben is taller than Carl. Who is the shortest?",
               "If Dora is shorter than Carl, who is now the shortest?"],
     "reference": ["Carl", "Dora"]},
    {"question_id": "rhea-4", "category": "writing",
     "turns": ["Write a four-line poem about a lighthouse.",
               "Now rewrite it so that every line ends with the same word."]},
    {"question_id": "rhea-5", "category": "stem",
     "turns": ["Explain what an enzyme does in two or three sentences.",
               "Give one example of an enzyme in human digestion and what it breaks down."]},
    {"question_id": "rhea-6", "category": "humanities",
     "turns": ["Summarise the main idea of supply and demand.",
               "How would a sudden frost that destroys orange crops affect orange juice "
               "prices, using that idea?"]},
    {"question_id": "rhea-7", "category": "coding",
     "turns": ["Write a Python function that returns the largest element of a list.",
               "Change it so that an empty list returns None instead of raising."]},
    {"question_id": "rhea-8", "category": "roleplay",
     "turns": ["Pretend you are a museum guide and greet a group of students.",
               "A student asks why the museum is closed on Mondays. Answer in character."]},
    {"question_id": "rhea-9", "category": "extraction",
     "turns": ["From the sentence 'Lena bought 3 apples and 5 pears in Graz on Friday', "
               "extract the city.",
               "Now extract the total number of fruits."],
     "reference": ["Graz", "8"]},
    {"question_id": "rhea-10", "category": "reasoning",
     "turns": ["If today is Wednesday, what day will it be in 10 days?",
               "And what day was it 10 days before today?"],
     "reference": ["Saturday", "Sunday"]},
)
