"""Integrations with frameworks, one leaf each: a leaf imports notifyonce's core and its
own framework; the core never imports a leaf, and each framework stays an optional extra.
"""
