"""sap_gpu: the same SAP time step batched over num_worlds worlds in NVIDIA Warp.

Same stage files and function names as ``sap_ref`` (DESIGN §1); added by the sap_gpu issue.
"""
