-- wrk script: POST the "burst" scenario (see bench/fake_upstream.py).
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(dir .. "common.lua")
common.setup("burst", "chat_stream.json")
done = common.done
