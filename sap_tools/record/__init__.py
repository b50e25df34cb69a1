"""``sap-record``: record a scene with Drake or MuJoCo (``python -m sap_tools.record``).

:mod:`~sap_tools.record.cli` is the command line and the recorders (``record_drake``,
``record_mujoco``, ``compare_recordings``); :mod:`~sap_tools.record.spec` turns a scene into a
Drake scene specification, :mod:`~sap_tools.record.drake` records a specification with pydrake,
:mod:`~sap_tools.record.document` writes the recording's JSON document and
:mod:`~sap_tools.record.checks` the checks in it; :mod:`~sap_tools.record.scene_file` checks a
Drake scene file before Drake builds it and :mod:`~sap_tools.record.overwrite` decides whether a
recording may replace the one already in ``--out``.
"""
