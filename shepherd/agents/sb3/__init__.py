"""The stable-baselines3 families behind the worker: what every SB3 algorithm shares (`base`), the on-policy
and off-policy adapters, masks, recurrent state, sb3-contrib's registrations. Imports nothing itself (the
registry imports the modules)."""
