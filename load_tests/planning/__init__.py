"""The planner and the autoscaler held to measurements: predicted against measured goodput
(``planner_check``), the front end's CPU costs fitted (``frontend_fit``), the SLO policy on
a load ramp, measured (``slo_ramp``) and simulated beyond one machine (``simulated_ramp``)."""
