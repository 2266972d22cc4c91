"""The original Shepherd client (seeds/shepherd-client-and-server.txt), updated only for gymnasium.

Changes from the seed: ``gymnasium`` instead of ``gym`` (``reset`` returns ``(obs, info)``, ``step``
returns ``terminated`` and ``truncated``), and the server URL and API key come from the environment
(``SHEPHERD_URL``, default http://localhost:8000/, and ``SHEPHERD_API_KEY``) instead of being edited in.
Everything else, including the endless loop, is the seed's. Needs ``requests`` and ``gymnasium``.

    SHEPHERD_API_KEY=... python examples/seed_client.py
"""
import os
import sys
import json
import requests

import gymnasium as gym

server_url = os.environ.get('SHEPHERD_URL', 'http://localhost:8000/').rstrip('/') + '/'
your_api_key = os.environ['SHEPHERD_API_KEY']

def send_json_to_website(d, path):
    """ Sends "d", a dictionary, to the website, and returns the response as a Python dictionary
    """
    r = requests.post(server_url + path, json=d)
    return r.json()

# Make the environment on client side (here, gym environment)
env = gym.make('CartPole-v1')
obs, info = env.reset()

# First communication: login user
ok = send_json_to_website({'apikey': your_api_key}, 'shepherd/login_user/')

if 'ok' in ok:
    print("Login successful")
    session_key = ok['session_key']

    # Start sending observations, in exhange of actions with the agent on the server side
    action = send_json_to_website({'obs': obs.tolist(), 'reward': 0.0, 'done': False, 'info': {}, 'session_key': session_key}, 'shepherd/env/')

    while True:
        print("action ", action)
        obs, reward, terminated, truncated, info = env.step(action['action'])
        done = terminated or truncated
        action = send_json_to_website({'obs': obs.tolist(), 'reward': reward, 'done': done, 'info': {}, 'session_key': session_key}, 'shepherd/env/')

        # End of an episode, beginning of a new one
        if action['action'] is None:
            assert(done)
            obs, info = env.reset()
            action = send_json_to_website({'obs': obs.tolist(), 'reward': 0.0, 'done': False, 'info': {}, 'session_key': session_key}, 'shepherd/env/')

    # When the client wants to stop, its last communication is to return None as observation
    action = send_json_to_website({'obs': None}, 'shepherd/env/')

else:
    print("ERROR: Could not login to server")
