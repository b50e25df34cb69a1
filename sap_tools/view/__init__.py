"""``sap-view``: watch a run in the browser or render it to a video (``python -m sap_tools.view``).

:mod:`~sap_tools.view.cli` is the command line and the browser viewer (viser);
:mod:`~sap_tools.view.video` renders a trajectory headless with MuJoCo's offscreen renderer.
"""
