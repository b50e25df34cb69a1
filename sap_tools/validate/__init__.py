"""``sap-validate``: hold an implementation of SAP against a recording (``python -m sap_tools.validate``).

:mod:`~sap_tools.validate.cli` is the command line and the validation (one-step and rollout
modes, the reports); :mod:`~sap_tools.validate.backends` the implementations it runs and
:mod:`~sap_tools.validate.diagnose` the diagnosis of a step that misses the bar.
"""
