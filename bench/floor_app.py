"""The floor of the benchmark: bare Flask answering small JSON, no token work at all."""

from flask import Flask, jsonify

app = Flask(__name__)


@app.get("/floor")
def floor():
    return jsonify(message="for all users", user={"username": "alice", "role": "user"})
