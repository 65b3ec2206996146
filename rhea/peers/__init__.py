"""Peer methods a user would pick instead of Rhea, run through their own libraries as context
policies on the same conversations (optional dependencies: ``make peers``)."""
