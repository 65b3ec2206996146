"""The ways people scope a standing rule, read by the recognizer's rules (no model needed), the
hard negatives that share their words, and what the instruction block keeps of a message."""
import pytest

from rhea.context import Conversation, Turn
from rhea.memory import InstructionalMemory, InstructionRecognizer, RecognizerDecision
from rhea.memory.recognizer import match_first_message, recognize_at, split_sentences
from rhea.memory.recognizer_eval import calibrate_for_recall, rule_verdicts

RULES = InstructionRecognizer(None)


@pytest.mark.parametrize("text", [
    # the conversation named as the scope
    "For the entirety of our conversation, please answer only with 'Yes' or 'No' to my questions.",
    "For the entire conversation, please respond as Ada Lovelace, maintaining her persona and knowledge.",
    "For the whole chat, keep it light-hearted.",
    "For the rest of our session, write every number in Roman numerals.",
    "For the remainder of this dialogue, be terse.",
    "Throughout our conversation, use metric units.",
    "Throughout this chat, please never apologise.",
    "Across this entire chat, write numbers as digits.",
    "While we chat, please call me Maestro.",
    "I'm planning a garden. Do not use any punctuation marks in any response.",
    # every turn / answer / reply / response
    "For every turn in this conversation, please respond using only past tense verbs.",
    "On every turn, mention a bird.",
    "In every answer, name one source.",
    "In each response, put the key term in bold.",
    "In all of your answers, use the Oxford comma.",
    "In all answers, use British spelling.",
    "Make every answer a numbered list.",
    "Every single reply should end with a question.",
    # whenever / from here on / all communications
    "Whenever you answer, spell out acronyms.",
    "Whenever you respond, keep it under three sentences.",
    "Every time you reply, add the word count at the end.",
    "Whenever I send a word, give me its etymology.",
    "From here on, be blunt with me.",
    "From here on out, no emojis.",
    "Going forward, show your reasoning first.",
    "Please address all communications in the third person.",
    "All of our communications should be in French.",
    # personas with a scope or a protocol
    "You are Captain Nemo for this chat.",
    "Stay in character as a grumpy pirate.",
    "Respond as a medieval blacksmith and don't break character.",
    "I want you to act as a Linux terminal. I will type commands and you will reply with what the terminal shows.",
])
def test_scoped_rules_are_standing_at_any_turn(text):
    for turn in (None, 0, 5):
        d = RULES(text, turn)
        assert d.is_global and d.kind == "add" and d.source == "rules", (text, turn, d)


@pytest.mark.parametrize("text", [
    "Can you advise me on some food that boosts the immune system? Please do not mention the word 'antioxidant'.",
    "What are some good books on Roman history? Please avoid the words 'fascinating' and 'epic'.",
    "How do tides work? Don't use the word 'moon' even once.",
    "What is a neural network? Use simple words, I'm a beginner.",
    "No emojis please. What are the main causes of inflation?",
    "Please respond as Marie Curie would. What was radium like to work with?",
    "Why is the sky blue? Answer like a pirate.",
    "Could you explain bond yields? Please address me in the third person.",
    "What's the difference between a levee and an embankment? Please respond to me only in Korean.",
    "Tell me about Morocco. Refrain from using the letter 'q'.",
])
def test_a_first_messages_bare_constraint_is_standing(text):
    first = RULES(text, 0)
    assert first.is_global and first.source == "rules" and match_first_message(text)
    # later in a conversation the same words usually refine the current task: left to stage 2
    assert RULES(text, 4).source != "rules" or not RULES(text, 4).is_global


@pytest.mark.parametrize("text", [
    # one-off requests
    "Rewrite this in JSON.",
    "Just this once, answer in English.",
    "For this question only, pretend you're a lawyer.",
    "Shorten your previous answer to one line.",
    # constraints on one piece of writing, or on the answer to the question just asked
    "Write a sonnet about rain without using the letter 'e'.",
    "Write a poem about cats. Do not use any commas in your response.",
    "Write a song about the sea. Do not mention the word 'blue'.",
    "Compose a 100-word story about a lost key, entirely in lowercase.",
    "Create a product description for a kettle. Use all lowercase letters.",
    "Where is Mary? Answer in one word.",
    "Is Canberra the capital of Australia? Answer yes or no.",
    "What's the difference between apples and pears? Answer in email format.",
    "Explain photosynthesis. Use less than 100 words.",
    # questions about rules
    "What does 'from now on' mean?",
    "How do actors stay in character for a whole film shoot?",
    "Is 'for the entirety of' grammatically correct?",
    "What's the difference between 'from now on' and 'henceforth'?",
    # quoted instructions and reports
    "My boss said 'always reply in French'. Is that a legal requirement?",
    "For the rest of the meeting, my manager kept interrupting me. How should I bring it up?",
    "My teacher always told us to never start a sentence with 'because'. Was she right?",
    "Going forward, what are the biggest risks for the euro?",
    # ordinary first messages
    "Hi, I'm Sam. I'm trying to decide between a Kindle and a Kobo.",
    "Why does my cat always sit on my keyboard?",
    "Please don't worry about the budget, just tell me the best laptop for video editing.",
])
def test_hard_negatives_are_not_standing_even_as_a_first_message(text):
    for turn in (0, 3):
        d = RULES(text, turn)
        assert not d.is_global, (text, turn, d)


@pytest.mark.parametrize("text", [
    # the rest of the conversation in other words
    "Please keep to US English throughout the rest of this chat.",
    "As long as this conversation lasts, assume I'm on Windows.",
    # plural replies with a standing modal, or an imperative on replies in the plural
    "Note: answers should never mention prices.",
    "Replies must always open with a one-line verdict.",
    "Keep your responses short and skip the preamble.",
    # a reply verb on every question
    "Respond in a numbered list for every question I ask.",
    "Please give me a one-word answer to each question.",
    # an emphatic ever
    "Do not ever recommend a brand name.",
    "No tables, ever.",
    "Make sure you never use the passive voice.",
    "Be sure to always say which source you used.",
    # when you talk to me / address me / everything you say
    "Use plain words when you're talking to me, I'm not a lawyer.",
    "Every time you address me, call me Captain.",
    "Everything you write should fit on a postcard.",
    # languages kept, everything in one language
    "Let's switch to French and stay in French.",
    "Can we do everything in Portuguese? I'm practising.",
    # as a rule / tone toward me
    "As a rule, give temperatures in Celsius.",
    "Be more blunt with me, please.",
    # a protocol for the messages to come
    "I'll paste some headlines; for each one, tell me if it is clickbait.",
    "I'm going to send you words in Spanish. For each one, give the English translation only.",
    # a persona named with everything it says
    "You are now a tired sports coach. Everything you say should sound like him.",
])
def test_wider_phrasing_families_are_standing(text):
    for turn in (None, 0, 4):
        d = RULES(text, turn)
        assert d.is_global and d.source == "rules", (text, turn, d)


@pytest.mark.parametrize("text", [
    "Before we start: no jargon, please. How do mortgages work?",
    "First of all, never use semicolons. What is stoicism?",
    "Could you explain the offside rule? Please avoid football metaphors.",
    "I'd like some help with my taxes. Write in the second person, like a coach talking to me.",
    "Can you help me understand inflation? Use the second person.",
])
def test_a_rule_after_a_preamble_or_beside_a_first_task_is_standing(text):
    d = RULES(text, 0)
    assert d.is_global and d.source == "rules", (text, d)


@pytest.mark.parametrize("text", [
    # hypotheticals and reports that carry a scope phrase
    "If I asked you to answer in emojis for the rest of the chat, would you?",
    "Suppose someone wanted every reply to rhyme. How would they ask?",
    "My friend keeps saying 'let's do everything in Excel'. Is that wise?",
    # statements of habit
    "I never use the dishwasher. Is handwashing worse for the planet?",
    "Every time I bake bread it comes out dense. Why?",
    "Don't ever let me forget the milk, haha. Anyway, how long does milk keep?",
    # one-off requests with the words of a rule
    "Use 15 words at most for each question in the quiz you just wrote.",
    "Number each question in the quiz, and put the answers at the end.",
    "I'll send you the file tomorrow, is that okay?",
    "Responses to the survey were mostly positive. How do I present them?",
])
def test_wider_hard_negatives_are_not_standing(text):
    for turn in (0, 3):
        d = RULES(text, turn)
        assert not (d.is_global and d.source == "rules"), (text, turn, d)


def test_the_block_keeps_only_the_rule_sentences():
    msg = ("Eurovision is known for being a blend of music and politics. Do you think politics should be kept out of "
           "it? Please mention the color blue at the start of every answer")
    d = RULES(msg, 0)
    assert d.is_global and d.rule == "Please mention the color blue at the start of every answer"
    im = InstructionalMemory()
    im.update(msg, d, turn=0)
    assert [e.text for e in im.entries] == [d.rule] and im.entries[0].source_message == msg
    assert "Eurovision" not in im.render() and "Do you think" not in im.render()
    # a rule beside the first task, and a persona with the instruction that goes on with it
    d = RULES("Can you advise me on some food that boosts the immune system? Please do not mention the word "
              "'antioxidant'.", 0)
    assert d.rule == "Please do not mention the word 'antioxidant'."
    d = RULES("Pretend yourself to be Elon Musk in all the following conversations. Speak like Elon Musk as much as "
              "possible. Why do we need to go to Mars?", 1)
    assert d.rule == ("Pretend yourself to be Elon Musk in all the following conversations. "
                      "Speak like Elon Musk as much as possible.")
    # one sentence, or a cue that spans sentences: the whole message
    assert RULES("From now on, answer in French.").rule == "From now on, answer in French."
    assert RULES("Stop answering in French.").rule == "Stop answering in French."
    assert RULES("What is 2+2?").rule is None
    with pytest.raises(ValueError, match="rule"):
        RecognizerDecision(False, "none", "default", rule="x")


def test_a_message_of_several_rules_keeps_all_of_them_with_their_examples():
    """MT-Eval's global instructions: a rule, how to write it (a sentence about "your responses", a colon and its
    example bullets), and a length rule on the same slot. Every part reaches the block; a later turn's rule on the
    same slot still replaces an earlier one."""
    msg = ("All your responses in the upcoming conversation must contain exactly 3 bullet points. Use the markdown "
           "bullet points such as:\n* This is point 1.\n* This is point 2.\n Keep all your responses under 200 words.")
    im = InstructionalMemory()
    im.update(msg, RULES(msg, 0), turn=0)
    block = im.render()
    for part in ("exactly 3 bullet points", "such as:\n* This is point 1.\n* This is point 2.", "under 200 words"):
        assert part in block
    msg = "All your responses in the upcoming conversation must be less than 4 sentences. Keep all your responses under 200 words."
    im = InstructionalMemory()
    im.update(msg, RULES(msg, 0), turn=0)
    assert [e.text for e in im.entries] == ["All your responses in the upcoming conversation must be less than 4 sentences.",
                                            "Keep all your responses under 200 words."]
    assert any(h.action == "conflict-kept" and "same message" in h.reason for h in im.history)
    later = "From now on, keep your answers under 50 words."
    im.update(later, RULES(later, 3), turn=3)
    assert "under 200 words" not in im.render() and later in im.render()
    msg = ("All your responses in the upcoming conversation must have two different responses. Your two different "
           "responses should be separated by 6 asterisk symbols: ******. Keep all your responses under 200 words.")
    assert "separated by 6 asterisk symbols" in RULES(msg, 0).rule
    # a list after a sentence that announces none stays out, as the task it is
    msg = "Please answer in French from now on. Here is my shopping list. * eggs * milk"
    assert RULES(msg, 0).rule == "Please answer in French from now on."


def test_rule_sentences_scored_by_stage_two():
    # a classifier that only likes sentences about French: it picks the rule sentence out
    rec = InstructionRecognizer(lambda t: 0.9 if "French" in t else 0.1)
    d = rec("I'm moving to Lyon next month. I'd love it if we kept to French. What's a good first dish to cook?")
    assert d.is_global and d.source == "classifier" and d.rule == "I'd love it if we kept to French."


def test_sentence_split_is_verbatim_and_respects_quotes():
    text = "End with 'Bye. See you' every time. Thanks!\nAlso be brief."
    parts = split_sentences(text)
    assert "".join(parts) == text and len(parts) == 3 and parts[0] == "End with 'Bye. See you' every time. "


def test_the_policy_reads_each_message_at_its_turn(tiny_model):
    from rhea.policies import get_policy

    policy = get_policy("rhea", model=tiny_model, recognizer=InstructionRecognizer(None), recent_raw=3)
    msg = "Can you advise me on some food that boosts the immune system? Please do not mention the word 'antioxidant'."
    plan = policy.build(Conversation([]), msg)
    assert [i for i in plan.decisions.instructions] and "antioxidant" in policy.im.render()
    assert "immune system" not in policy.im.render()
    later = get_policy("rhea", model=tiny_model, recognizer=InstructionRecognizer(None), recent_raw=3)
    later.build(Conversation([Turn("Hello!", "Hi, how can I help?")]), msg)
    assert later.im.render() == ""  # the same words later in a conversation refine one answer


def test_recognize_at_and_turn_checks():
    seen = []
    assert recognize_at(lambda text: seen.append(text) or 1, "hi", 0) == 1 and seen == ["hi"]
    assert recognize_at(RULES, "No emojis please. What is inflation?", 0).is_global
    for bad in (-1, True, 1.5, "0"):
        with pytest.raises(ValueError, match="turn"):
            RULES("hello", bad)
    assert rule_verdicts(["No emojis please. What is inflation?"] * 2, [0, 3]).tolist() == [1, -1]
    with pytest.raises(ValueError, match="turns"):
        rule_verdicts(["a", "b"], [0])


def test_recall_first_calibration():
    import numpy as np

    scores = np.array([0.95, 0.9, 0.6, 0.4, 0.3, 0.2, 0.1])
    labels = np.array([1, 0, 1, 0, 1, 0, 0])
    # the highest threshold that still keeps recall >= the target: the best precision there
    assert calibrate_for_recall(scores, labels, min_recall=0.6) == 0.6
    assert calibrate_for_recall(scores, labels, min_recall=1.0) == 0.3
    assert calibrate_for_recall(scores, labels, min_recall=1.0, floor=0.5) == 0.5
    with pytest.raises(ValueError, match="min_recall"):
        calibrate_for_recall(scores, labels, min_recall=0.0)
