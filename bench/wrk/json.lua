-- wrk script: POST the "json" scenario (see bench/fake_upstream.py).
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(dir .. "common.lua")
common.setup("json", "chat_nonstream.json")
done = common.done
