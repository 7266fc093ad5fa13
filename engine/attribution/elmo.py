"""ELMo's objectives are the family's own (engine/families/elmo/objective.py); the memory
count that bounds their batches stays reachable here by the name callers know."""
from engine.families.elmo.objective import row_bytes  # noqa: F401
