"""sap_ref: the readable single-world NumPy/SciPy reference of Drake's SAP time step.

One world at a time, float64 unless a precision knob says otherwise (docs/design.md § Layout). Its stages
(kinematics, dynamics, free motion, collision, contact Jacobians, constraints, the Newton
solve, line searches, integration) are one module each (docs/pipeline.md);
the model, conventions and configuration it runs on live in ``sap_common``.
"""
