"""preemption"""
