-- wrk script: POST the "paced" scenario (see bench/fake_upstream.py).
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(dir .. "common.lua")
common.setup("paced", "chat_stream.json")
done = common.done
