-- wrk script: the "burst" scenario (see bench/fake_upstream.py) through the Responses front door.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(dir .. "common.lua")
common.setup("burst", "responses_stream.json")
wrk.path = "/v1/responses"
done = common.done
