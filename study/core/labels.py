"""The label of a position that is not scored.

Tasks write it into their label arrays; the training engine and the analyses skip it.
"""

IGNORE = -1
