"""Rhea's memories: the instruction recognizer and instructional memory (the verbatim
system block of global rules); episodic memory joins them in `rhea.memory.episodic`.

>>> from rhea.memory import InstructionRecognizer, InstructionalMemory
"""
from rhea.memory.instructional import InstructionalMemory, InstructionEntry, MemoryEvent, infer_slots
from rhea.memory.recognizer import (
    HashedNgramClassifier,
    InstructionRecognizer,
    PromptClassifier,
    RecognizerDecision,
    load_labelled,
    precision_recall,
)

__all__ = [
    "InstructionRecognizer", "RecognizerDecision", "HashedNgramClassifier", "PromptClassifier",
    "load_labelled", "precision_recall", "InstructionalMemory", "InstructionEntry", "MemoryEvent", "infer_slots",
]
