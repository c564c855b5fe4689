"""Baseline configs: the typed schema, layering, overrides, presets, resume and the errors a user sees."""
import doctest
from pathlib import Path

import pydantic
import pytest
import yaml

from baselines import launch  # the scripts' command line
from cube_jax.core.observations import OBSERVATION_FORM_NAMES
from cube_jax.rl import config as C

ROOT = Path(__file__).resolve().parents[2]


def test_default_ippo_config_is_the_cpu_preset_on_easy():
    cfg = C.build("ippo")
    assert isinstance(cfg, C.Config)
    assert cfg.algo == "ippo"
    assert cfg.env.scenario == "easy"
    # The preset trains with the potential-based shaping; the environment keeps the papers' reward.
    assert cfg.shaping.enabled is True and cfg.shaping.reach_weight == 2.0 and cfg.shaping.dense_coef == 0.3
    assert C.Config().shaping.enabled is False
    assert cfg.train.num_envs == 128 and cfg.num_seeds == 4  # small enough for a laptop CPU


def test_schema_defaults_are_the_documented_ones():
    defaults = C.Config().model_dump()
    assert defaults["train"] == {
        "num_envs": 64, "num_steps": 32, "total_timesteps": 2_000_000, "update_epochs": 4, "num_minibatches": 4,
        "lr": 2.5e-3, "anneal_lr": True, "gamma": 0.99, "gae_lambda": 0.95, "clip_eps": 0.2, "ent_coef": 0.01,
        "ent_coef_final": None, "critic_warmup": 0, "vf_coef": 0.5, "max_grad_norm": 0.5, "num_devices": 0, "cpu_devices": 0,
        "seed_axis": "auto",
        "updates_per_call": 10, "stall_seconds": 120,
        "stagger_start": True, "target_success": 0.9, "target_check_every": 5, "init_from": None, "max_seconds": None,
    }
    assert defaults["env"] == {"scenario": "easy", "n": None, "num_agents": None, "observation": "vector", "view_radius": 3,
                               "pool_size": 4096, "max_steps": None}
    assert list(defaults) == ["algo", "seed", "num_seeds", "env", "network", "train", "pqn", "shaping", "eval",
                              "output", "logger", "distributed"]
    assert defaults["logger"] == {"tensorboard": False, "wandb": None, "project": "cube_jax", "group": None, "tags": []}


def test_a_config_is_immutable():
    cfg = C.build("ippo")
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        cfg.train.lr = 1.0


def test_shaping_can_be_switched_off_for_the_papers_reward():
    assert C.build("ippo", overrides=["shaping.enabled=false"]).shaping.enabled is False


def test_overrides_are_parsed_as_yaml_values():
    cfg = C.build("mappo", overrides=["env.scenario=hard", "train.num_envs=512", "train.lr=3e-4",
                                      "shaping.enabled=false", "network.critic_input=grid", "output.name=2024"])
    assert cfg.algo == "mappo"
    assert cfg.env.scenario == "hard"
    assert cfg.train.num_envs == 512
    assert cfg.train.lr == pytest.approx(3e-4) and isinstance(cfg.train.lr, float)
    assert cfg.shaping.enabled is False
    assert cfg.network.critic_input == "grid"
    assert cfg.output.name == "2024"  # a name that looks like a number stays a name


def test_yaml_files_may_write_floats_without_a_dot(tmp_path):
    path = tmp_path / "lr.yaml"
    path.write_text("train:\n  lr: 3e-4\n  gamma: 1e-1\n")  # YAML 1.1 reads both as strings
    cfg = C.build("ippo", config_files=[path])
    assert (cfg.train.lr, cfg.train.gamma) == (pytest.approx(3e-4), pytest.approx(0.1))


def test_curriculum_override_and_make_kwargs():
    cfg = C.build("ippo", overrides=["env.scenario=null", "env.n=4"])
    assert C.env_kwargs(cfg) == {"observation": "vector", "view_radius": 3, "n": 4, "pool_size": 4096}


def test_observation_forms_are_the_cores():
    choices = C.Config.model_fields["env"].annotation.model_fields["observation"].annotation.__args__
    assert set(choices) == set(OBSERVATION_FORM_NAMES) == {"vector", "egocentric", "egocentric_noid", "grid"}
    for form in ("vector", "egocentric", "egocentric_noid", "grid"):
        assert C.build("ippo", overrides=[f"env.observation={form}"]).env.observation == form
    with pytest.raises(C.ConfigError, match="env.observation must be 'vector', 'egocentric', 'egocentric_noid' or 'grid', got 'pixels'"):
        C.build("ippo", overrides=["env.observation=pixels"])


def test_gpu_preset_is_one_flag_away():
    cfg = C.build("ippo", preset="gpu")
    assert cfg.train.num_envs == 4096
    assert cfg.env.scenario == "easy"  # the preset changes scale, not the world


def test_presets_are_found_by_name_without_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # as an installed package runs: no configs/ anywhere near
    assert C.CONFIG_DIR.relative_to(Path(C.__file__).parent) == Path("presets")
    assert C.presets() == ["curriculum", "gpu", "hard", "ippo_rnn", "mappo_rnn"]
    cfg = C.build("mappo", preset="mappo_rnn")
    assert cfg.network.recurrent is True and cfg.train.num_minibatches == 2


def test_the_repository_configs_are_the_packaged_presets():
    shipped = {p.name: p.read_text() for p in C.CONFIG_DIR.glob("*.yaml")}
    copies = {p.name: p.read_text() for p in (ROOT / "configs").glob("*.yaml")}
    assert sorted(shipped) == ["curriculum.yaml", "gpu.yaml", "hard.yaml", "ippo.yaml", "ippo_rnn.yaml",
                               "mappo.yaml", "mappo_rnn.yaml", "pqn_vdn.yaml"]
    assert copies == shipped  # configs/ is the users' copy; edit the package's, then copy it there


def test_curriculum_preset_trains_on_the_n_curriculum_with_the_nearest_reach():
    cfg = C.build("ippo", preset="curriculum", overrides=["env.n=3"])
    assert cfg.env.scenario is None and cfg.env.n == 3
    assert cfg.shaping.reach == "nearest" and cfg.shaping.dense_coef == 0.0
    assert "curriculum" in C.presets()


def test_presets_layer_in_order_on_the_command_line():
    cfg = launch.parse_args("mappo", ["--preset", "hard", "--preset", "gpu", "train.lr=1e-4"])
    assert cfg.env.scenario == "hard" and cfg.shaping.enabled is True  # from hard.yaml
    assert (cfg.shaping.reach, cfg.shaping.reach_weight, cfg.shaping.align_weight) == ("nearest", 2.0, 1.0)
    assert cfg.train.num_envs == 4096 and cfg.train.total_timesteps == 200_000_000  # gpu.yaml, later
    assert cfg.train.lr == 1e-4  # overrides come last


def test_later_files_override_earlier_ones(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("train:\n  num_envs: 32\n  num_steps: 16\n")
    second.write_text("train:\n  num_envs: 256\n")
    cfg = launch.parse_args("ippo", ["--config", str(first), "--config", str(second), "--preset", "gpu"])
    assert cfg.train.num_steps == 64  # the gpu preset comes after the --config files
    assert cfg.train.num_envs == 4096
    cfg = launch.parse_args("ippo", ["--config", str(first), "--config", str(second)])
    assert (cfg.train.num_envs, cfg.train.num_steps) == (256, 16)


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.num_env=4", "override 'train.num_env=4': unknown config key 'train.num_env' "
                            "(did you mean 'train.num_envs' or"),
        ("trian.lr=1", "unknown config key 'trian.lr' (did you mean 'train.lr'"),
        ("train=3", "'train' is a section"),
        ("train.lr.x=1", "'train.lr' is a value, not a section"),
        ("train.num_envs=0", "override 'train.num_envs=0': train.num_envs must be greater than 0, got 0"),
        ("train.num_envs=abc", "train.num_envs must be a valid integer, got 'abc'"),
        ("train.num_envs=2.5", "train.num_envs must be a valid integer, got 2.5"),
        ("train.gamma=1.5", "train.gamma must be less than or equal to 1, got 1.5"),
        ("algo=dqn", "algo must be 'ippo', 'mappo' or 'pqn_vdn', got 'dqn'"),
        ("env.n=4", "override 'env.n=4': set exactly one of env.scenario"),
        ("train.num_minibatches=3", "must be divisible by train.num_minibatches = 3"),
        ("train.total_timesteps=100", "train.total_timesteps = 100 is less than one update"),
        ("distributed.process_id=1", "distributed.process_id = 1 must be less than distributed.num_processes = 1"),
        ("train.lr", "expected key=value"),
        ("shaping.enabled=maybe", "shaping.enabled must be a valid boolean, got 'maybe'"),
        ("shaping.reach_weight=-1", "shaping.reach_weight must be greater than or equal to 0, got -1"),
        ("train.target_success=2", "train.target_success must be less than or equal to 1, got 2"),
        ("train.target_check_every=0", "train.target_check_every must be greater than 0, got 0"),
        ("train.max_seconds=0", "train.max_seconds must be greater than 0, got 0"),
        ("train.max_seconds=soon", "train.max_seconds must be a valid integer, got 'soon'"),
        ("train.ent_coef_final=-0.01", "train.ent_coef_final must be greater than or equal to 0, got -0.01"),
        ("train.ent_coef_final=none", "train.ent_coef_final must be a valid number, got 'none'"),
        ("shaping.dense_coef=-0.3", "shaping.dense_coef must be greater than or equal to 0, got -0.3"),
        ("shaping.reach=closest", "shaping.reach must be 'quorum', 'nearest' or 'focus', got 'closest'"),
        ("train.cpu_devices=-1", "train.cpu_devices must be greater than or equal to 0, got -1"),
        ("train.cpu_devices=3", "train.num_envs = 128 must be divisible by train.cpu_devices = 3"),
    ],
)
def test_bad_overrides_say_what_is_wrong(override, message):
    with pytest.raises(C.ConfigError) as err:
        C.build("ippo", overrides=[override])
    assert message in str(err.value)


def test_a_typo_lists_the_keys_of_its_section():
    with pytest.raises(C.ConfigError) as err:
        C.build("ippo", overrides=["env.observaton=grid"])
    assert str(err.value) == (
        "override 'env.observaton=grid': unknown config key 'env.observaton' (did you mean 'env.observation'?); "
        "keys of env: scenario, n, num_agents, observation, view_radius, pool_size, max_steps"
    )


def test_a_cross_field_error_names_where_each_value_came_from():
    with pytest.raises(C.ConfigError) as err:
        C.build("ippo", overrides=["train.num_minibatches=3"])
    ippo_yaml = str(C.CONFIG_DIR / "ippo.yaml")
    assert str(err.value) == (
        f"{ippo_yaml}, override 'train.num_minibatches=3': train.num_envs * train.num_steps = 4096 must be "
        "divisible by train.num_minibatches = 3"
    )


def test_errors_quote_a_short_excerpt_of_a_long_value(tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text("train:\n  lr: [" + ", ".join(["0.1"] * 500) + "]\n")
    with pytest.raises(C.ConfigError) as err:
        C.build("ippo", config_files=[path])
    excerpt = "[" + "0.1, " * 11 + "0..."  # 60 characters of the 2,000-character list
    assert str(err.value) == f"{path}: train.lr must be a valid number, got {excerpt}"


def test_unknown_preset_lists_the_available_ones():
    with pytest.raises(C.ConfigError, match=r"available presets: \['curriculum', 'gpu', 'hard', 'ippo_rnn', 'mappo_rnn'\]"):
        C.build("ippo", preset="tpu-pod")


def test_config_file_with_unknown_key_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  learning_rate: 0.1\n")
    with pytest.raises(C.ConfigError, match=r"bad\.yaml: unknown config key 'train\.learning_rate'"):
        C.build("ippo", config_files=[path])


def test_config_file_with_a_bad_value_names_the_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("eval:\n  episodes: -3\n")
    with pytest.raises(C.ConfigError) as err:
        C.build("ippo", config_files=[path])
    assert str(err.value) == f"{path}: eval.episodes must be greater than 0, got -3"
    path.write_text("- a list\n")
    with pytest.raises(C.ConfigError, match=r"bad\.yaml: expected a mapping of config keys at the top level, got list"):
        C.build("ippo", config_files=[path])
    path.write_text("train: [unclosed\n")
    with pytest.raises(C.ConfigError, match=r"bad\.yaml: not valid YAML at line 2"):
        C.build("ippo", config_files=[path])


def test_resume_loads_the_saved_config_and_reapplies_the_command_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    saved = C.build("mappo", overrides=["env.scenario=hard", "train.lr=0.01", "num_seeds=2"])
    (run / "config.yaml").write_text(yaml.safe_dump(saved.model_dump(), sort_keys=False))
    cfg = C.build("mappo", overrides=[f"output.resume={run / 'checkpoint'}", "train.total_timesteps=4000000"])
    assert cfg.algo == "mappo" and cfg.env.scenario == "hard" and cfg.num_seeds == 2  # the run's own config
    assert cfg.train.lr == 0.01
    assert cfg.train.total_timesteps == 4_000_000  # the command line still applies
    assert cfg.output.resume == str(run / "checkpoint")
    # The saved file is a plain YAML dump that reads back to the same config.
    assert C.build("mappo", overrides=[f"output.resume={run}"]).model_dump() == (
        saved.model_dump() | {"output": saved.output.model_dump() | {"resume": str(run)}}
    )
    (run / "config.yaml").write_text("algo: mappo\ntrain:\n  lr: -1\n")
    with pytest.raises(C.ConfigError, match=r"run/config\.yaml: train\.lr must be greater than or equal to 0"):
        C.build("mappo", overrides=[f"output.resume={run}"])
    with pytest.raises(C.ConfigError, match=r"output.resume='.*nowhere': no config.yaml in run folder"):
        C.build("ippo", overrides=[f"output.resume={tmp_path / 'nowhere'}"])


def test_command_line_errors_exit_with_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        launch.parse_args("ippo", ["train.num_envs=-2"])
    assert exc.value.code == 2
    assert "override 'train.num_envs=-2': train.num_envs must be greater than 0, got -2" in capsys.readouterr().err


def test_the_module_examples_run():
    assert doctest.testmod(C).failed == 0


def test_cpu_devices_auto_is_one_per_core_that_splits_the_batch():
    from cube_jax.rl.run import MAX_AUTO_CPU_DEVICES, cpu_device_count

    ippo = C.build("ippo")  # 128 envs x 32 steps, 2 minibatches
    assert [cpu_device_count(ippo, cores) for cores in (1, 2, 3, 4, 16)] == [1, 2, 2, 4, MAX_AUTO_CPU_DEVICES]
    assert cpu_device_count(C.build("ippo", overrides=["train.num_envs=96"]), 16) == 8
    assert cpu_device_count(C.build("ippo", overrides=["train.num_envs=6", "train.num_steps=4"]), 4) == 3
    # recurrent minibatches are whole environments: each device needs a multiple of the 4 minibatches
    rnn = C.build("ippo", preset="ippo_rnn", overrides=["train.num_envs=24", "train.num_minibatches=4"])
    assert cpu_device_count(rnn, 8) == 6 and cpu_device_count(rnn, 5) == 3
    pqn = C.build("pqn_vdn", overrides=["train.num_envs=10", "train.num_steps=1", "pqn.num_minibatches=5"])
    assert cpu_device_count(pqn, 4) == 2  # 10 / 4 leaves a remainder; 2 devices of 5 team steps, one per minibatch
    assert cpu_device_count(C.build("ippo", overrides=["train.cpu_devices=2"]), 16) == 2  # asked for: as is


def test_cpu_devices_leave_an_explicit_host_device_count_and_started_backends_alone(monkeypatch):
    from cube_jax.rl.run import configure_cpu_devices

    cfg = C.build("ippo")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert configure_cpu_devices(cfg) is None
    monkeypatch.setenv("XLA_FLAGS", "")
    import jax

    jax.numpy.zeros(1).block_until_ready()  # this process's backends are started
    assert configure_cpu_devices(cfg) is None


def test_a_resume_keeps_the_runs_config_and_names_what_a_command_would_change(tmp_path):
    import yaml

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(C.build("ippo", overrides=["network.hidden=32"]).model_dump()))
    resumed = C.build("ippo", overrides=[f"output.resume={run}", "train.total_timesteps=4000000", "logger.tensorboard=true"])
    assert resumed.network.hidden == 32 and resumed.train.total_timesteps == 4_000_000
    with pytest.raises(C.ConfigError, match=r"another config \(network.hidden: 32 -> 128, train.lr: .*start a new run"):
        C.build("ippo", overrides=[f"output.resume={run}", "network.hidden=128", "train.lr=0.1"])
    with pytest.raises(C.ConfigError, match="that run trained algo=ippo, this command trains mappo"):
        C.build("mappo", overrides=[f"output.resume={run}"])
