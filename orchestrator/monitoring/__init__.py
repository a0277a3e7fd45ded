"""Monitoring: the tool's own state as Prometheus metrics, the alert rules, the dashboard, service discovery.

`state.py` carries what one publish hands to the next (counters, each release's last figures and gates),
`render.py` turns it into Prometheus' text format (pure), `publish.py` the host-side script that writes it for
node_exporter's textfile collector, `sd.py` file-based service discovery for a group. The alert rules
(`rules.yaml`) and the Grafana dashboard (`dashboard.json`) are data shipped in this package.
"""
