-- wrk script: POST /pub with a 200-byte body (usage in bench/README.md)
wrk.method = "POST"
wrk.body = string.rep("x", 200)
wrk.headers["Content-Type"] = "application/octet-stream"
