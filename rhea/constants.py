"""Names shared across rhea's packages."""

#: The placeholder token whose embedding slots hold latent vectors (compression read-out
#: slots in `compress`, injected latents in `forward`/`generate`).
MEM_TOKEN = "<mem>"

#: A past turn's tier in a plan, indexed by `rhea_kernels`' tier code (0 drop, 1 latent, 2 raw):
#: kept as raw text, as latents, or dropped.
TIERS = ("drop", "latent", "raw")

#: The policy a `ChatSession` (and ``rhea chat``) runs when none is named: Rhea itself.
DEFAULT_POLICY = "rhea"
#: The policies ``rhea bench`` runs by default: those that run offline on any RheaForCausalLM,
#: with no extra data or endpoint (the text baselines, reply soft-compression and Rhea).
BENCH_POLICIES = ("vanilla", "recent-k", "bm25", "summary", "reply-soft-compress", "rhea")

#: The ICAE-style reconstruction prompt: latents, then this instruction, then the reply verbatim
#: (the compressor's auto-encoding stage trains on it; `rhea.eval.fact_recall` reconstructs through it).
AUTOENCODE_PROMPT = "Repeat the reply above word for word."
