"""Findings: predicted against measured (comparison), the step-time predictor and its calibration, summary, figures."""
