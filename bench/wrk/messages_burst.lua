-- wrk script: the "burst" scenario (see bench/fake_upstream.py) through the Anthropic Messages front door.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(dir .. "common.lua")
common.setup("burst", "messages_stream.json")
wrk.path = "/v1/messages"
done = common.done
