"""sap_ref: the readable single-world NumPy/SciPy reference of Drake's SAP time step.

One world at a time, float64 unless a precision knob says otherwise (DESIGN §1). Its stages
(kinematics, dynamics, free motion, collision, contact Jacobians, constraints, the Newton
solve, line searches, integration) are added by the dynamics and reference-solver issues;
the model, conventions and configuration it runs on live in ``sap_common``.
"""
