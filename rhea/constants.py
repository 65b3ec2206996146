"""Names shared across rhea's packages."""

#: The placeholder token whose embedding slots hold latent vectors (compression read-out
#: slots in `compress`, injected latents in `forward`/`generate`).
MEM_TOKEN = "<mem>"
