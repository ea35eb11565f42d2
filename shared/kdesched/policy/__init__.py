"""DeschedulerPolicy loading: v1alpha2, legacy v1alpha1 (converted as upstream v0.27-v0.30 did),
validated and defaulted into the frozen objects of :mod:`kdesched.policy.types`.

Why: every error in a policy must be found and reported at once, naming profile, plugin and
field, before any API call is made.
"""
