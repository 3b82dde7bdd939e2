"""The schedule wing: when a slot may fire.

``window`` (one send window), ``schedule`` (a validated chain of them), ``rules``
(each rule a Schedule must satisfy), ``timeline`` (drawing one), ``selection``
(SQLAlchemy filters for the rows in an open window), ``durations`` (``6h30m``).
Pure code over the shared vocabulary; ``selection`` alone needs SQLAlchemy.
"""
