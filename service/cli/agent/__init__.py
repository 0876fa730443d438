"""`gpuq mcp`: gpuq as Model Context Protocol tools and resources, for coding agents.

The server is one more client of the API, like the rest of `gpuq`: every tool is one or a
few of the user's own API calls, under their token or Unix account, so an agent can see and
do exactly what its user can (docs/team/agents.md).
"""
